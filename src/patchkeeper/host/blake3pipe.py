"""blake3 through a helper process, for an agent whose interpreter cannot import blake3 on a machine where another can.

A local target's records are hashed with blake3 by patchkeeper's own Python; when the target's
interpreter differs (the venv rebuilt on another Python, or patchkeeper reinstalled on one) its agent
runs there, where blake3 may not be importable. The controller then names its own interpreter in
PATCHKEEPER_BLAKE3, and this module stands in for the blake3 module: each hash object streams its
bytes to one helper process per agent process (a forked process starts its own), which hashes them
with blake3 and sends the digest back. The digests are blake3's own, so every record stays readable
and comparable whichever interpreter runs the agent. Standard library only (shipped to hosts, where
the variable is never set).
"""

from __future__ import annotations

import os
import struct
import subprocess
import threading

from .errors import AgentError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Optional

VARIABLE = "PATCHKEEPER_BLAKE3"  # the interpreter that can import blake3 (set for local targets' agents only)
_FRAME = struct.Struct("<cII")  # op (u: update, d: digest), hash id, payload length
_SERVE = (
    "import sys, struct, blake3\n"
    "r, w, frame, states = sys.stdin.buffer, sys.stdout.buffer, struct.Struct('<cII'), {}\n"
    "while True:\n"
    "    head = r.read(9)\n"
    "    if len(head) < 9:\n"
    "        break\n"
    "    op, hid, n = frame.unpack(head)\n"
    "    data = r.read(n) if n else b''\n"
    "    if op == b'u':\n"
    "        h = states.get(hid)\n"
    "        if h is None:\n"
    "            h = states[hid] = blake3.blake3()\n"
    "        h.update(data)\n"
    "    else:\n"
    "        h = states.pop(hid, None) or blake3.blake3()\n"
    "        w.write(h.digest())\n"
    "        w.flush()\n"
)


class _Helper:
    """The helper process of this process (started on first use, and again after a fork)."""

    def __init__(self, python: str) -> None:
        self.python = python
        self.lock = threading.Lock()
        self.proc: Any = None
        self.pid = 0
        self.ids = 0

    def _started(self) -> Any:
        if self.proc is None or self.pid != os.getpid():
            self.proc = subprocess.Popen(
                [self.python, "-I", "-c", _SERVE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
            )
            self.pid = os.getpid()
        return self.proc

    def new_id(self) -> int:
        with self.lock:
            self.ids = (self.ids + 1) & 0xFFFFFFFF
            return self.ids

    def send(self, op: bytes, hid: int, data: bytes = b"") -> Optional[bytes]:
        with self.lock:
            proc = self._started()
            try:
                _write_all(
                    proc.stdin.fileno(),
                    _FRAME.pack(op, hid, len(data)) + data
                    if len(data) < 65536
                    else _FRAME.pack(op, hid, len(data)),
                )
                if len(data) >= 65536:
                    _write_all(proc.stdin.fileno(), data)
                if op != b"d":
                    return None
                out = b""
                while len(out) < 32:
                    chunk = os.read(proc.stdout.fileno(), 32 - len(out))
                    if not chunk:
                        break
                    out += chunk
            except OSError as exc:
                out = b""
                why = str(exc)
            else:
                why = "it ended"
            if len(out) != 32:
                self.proc = None
                raise AgentError(
                    "no-algorithm",
                    f"cannot hash with blake3 through {self.python} ({why})",
                    "check that patchkeeper's own Python still imports blake3",
                )
            return out


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class _Hash:
    """A blake3 hash object whose bytes are hashed by the helper process."""

    def __init__(self, helper: _Helper) -> None:
        self._helper = helper
        self._id = helper.new_id()
        self._done: Optional[bytes] = None

    def update(self, data: Any) -> None:
        if data:
            self._helper.send(b"u", self._id, bytes(data))

    def digest(self) -> bytes:
        if self._done is None:
            self._done = self._helper.send(b"d", self._id)
        return self._done  # type: ignore[return-value]

    def hexdigest(self) -> str:
        return self.digest().hex()


class Module:
    """Stands in for the blake3 module: `blake3()`, as disk.py uses it."""

    def __init__(self, python: str) -> None:
        helper = _Helper(python)

        def blake3(data: bytes = b"") -> _Hash:
            h = _Hash(helper)
            h.update(data)
            return h

        self.blake3 = blake3


def module() -> Optional[Module]:
    """The stand-in, where the controller named an interpreter that imports blake3 (else None)."""
    python = os.environ.get(VARIABLE)
    if not python or not os.path.isfile(python):
        return None
    return Module(python)
