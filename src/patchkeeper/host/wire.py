"""The agent protocol: length-prefixed frames (a JSON header, then raw byte payloads).

This module is shipped to a remote host after agent.py and executed there, so it uses the
standard library only. A frame is a 4-byte big-endian header length (its top bit set when the
header is zlib-compressed), the header (JSON), then the payloads the header lists by length.
Bytes inside a value travel as payloads and are referred to from the JSON as {"\\u0000b": index},
so file contents are never base64-bloated. While a call runs longer than BEAT seconds the agent sends
a heartbeat frame ({"beat": 1, "done": files read, "total": files found to read: progress.now(), "phase":
progress.current(), "work": the process's CPU time and I/O so far: progress.work()) every BEAT seconds, so
the controller can tell a long call from a frozen agent or a dead connection by silence, and a working
call from one that waits for good (on a FIFO, a hung mount) by `work` (remote_agent.AgentProxy), and show
how far the call is and in which phase.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import sys
import threading
import traceback
import zlib
from typing import Any, BinaryIO, Callable

from . import progress
from .contract import requests_from_wire, to_wire

_BYTES = "\x00b"  # a key no path or field can be
_SQUEEZE = 16 << 10  # headers larger than this (long path lists, scans) travel zlib-compressed
SQUEEZED = 1 << 31  # flag in the length prefix
# What the agent sends before its first frame: whatever its interpreter printed before it ran (a
# sitecustomize, a .pth) comes before this and is skipped by the controller, up to NOISE_MAX bytes.
MAGIC = b"\x00\x00patchkeeper-agent-1\n"
NOISE_MAX = 64 << 10
MAX_HEADER = 256 << 20  # a frame's header (JSON), as sent and once decompressed
MAX_PAYLOAD = 1 << 36  # one payload (a file's bytes)
BEAT = 1.0  # seconds between two heartbeats of a running call


class FrameError(ValueError):
    """Bytes on the wire that are not a frame (a length out of bounds, a header that is not one)."""


def unpack(value: Any, blobs: list[bytes]) -> Any:
    """`value` with each {"\\u0000b": index} replaced by its payload."""
    if isinstance(value, dict):
        if len(value) == 1 and _BYTES in value:
            index = value[_BYTES]
            if type(index) is not int or not 0 <= index < len(blobs):
                raise FrameError(f"a payload reference {index!r} out of range")
            return blobs[index]
        return {k: unpack(v, blobs) for k, v in value.items()}
    if isinstance(value, list):
        return [unpack(v, blobs) for v in value]
    return value


def encode(header: dict[str, Any], value: Any = None) -> bytes:
    """One frame: `header` plus `value` (under "v"), bytes split out as payloads.

    json's own encoder walks the value (tuples become lists) and hands each bytes object to
    `default`, in order: no walk in Python over a scan's rows."""
    blobs: list[bytes] = []

    def default(obj: Any) -> Any:
        if isinstance(obj, (bytes, bytearray, memoryview)):
            blobs.append(bytes(obj))
            return {_BYTES: len(blobs) - 1}
        raise TypeError(f"{type(obj).__name__} cannot cross the wire")

    # ensure_ascii (the default) keeps surrogates intact
    body = json.dumps(dict(header, v=value), separators=(",", ":"), default=default)
    head = (body[:-1] + ',"n":' + json.dumps([len(b) for b in blobs]) + "}").encode()
    flag = 0
    if len(head) > _SQUEEZE:
        head, flag = zlib.compress(head, 1), SQUEEZED
    return b"".join([struct.pack(">I", len(head) | flag), head, *blobs])


def decode(read_exact: Callable[[int], bytes]) -> tuple[dict[str, Any], Any]:
    """Read one frame with `read_exact(n)`; return (header, value). FrameError when the bytes are
    not a frame (nothing longer than MAX_HEADER or MAX_PAYLOAD is read)."""
    (size,) = struct.unpack(">I", read_exact(4))
    if size & ~SQUEEZED > MAX_HEADER:
        raise FrameError(f"a frame header of {size & ~SQUEEZED} bytes")
    head = read_exact(size & ~SQUEEZED)
    try:
        if size & SQUEEZED:
            inflate = zlib.decompressobj()
            head, tail = inflate.decompress(head, MAX_HEADER), inflate.unconsumed_tail
        else:
            tail = b""
        doc = json.loads(head)
    except (zlib.error, ValueError) as exc:
        raise FrameError(f"a frame header that is not JSON ({str(exc)[:80]})") from None
    if tail:
        raise FrameError(f"a frame header of more than {MAX_HEADER} bytes")
    sizes = doc.pop("n", None) if isinstance(doc, dict) else None
    if (
        not isinstance(sizes, list)
        or "v" not in doc
        or not all(type(n) is int and 0 <= n <= MAX_PAYLOAD for n in sizes)
    ):
        raise FrameError("a frame header without its value and payload sizes")
    blobs = [read_exact(n) for n in sizes]
    value = doc.pop("v")
    return doc, unpack(value, blobs) if blobs else value  # without payloads nothing needs rebuilding


def error_doc(exc: BaseException) -> dict[str, Any]:
    """How an exception raised on the host travels back to the controller."""
    doc: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, OSError):
        doc.update(errno=exc.errno, strerror=exc.strerror, filename=exc.filename)
    kind = getattr(exc, "kind", None)
    if isinstance(kind, str):
        doc["kind"] = kind
    if not isinstance(exc, OSError) and kind is None:
        doc["trace"] = traceback.format_exc(limit=3)[-1500:]
    return doc


def is_beat(header: dict[str, Any]) -> bool:
    """Whether a frame is a heartbeat of a call still running (not its answer)."""
    return header.get("beat") == 1


class _Heart:
    """Sends a heartbeat every BEAT seconds while a call runs; every frame goes out under its lock."""

    def __init__(self, sink: BinaryIO) -> None:
        self.sink = sink
        self.cond = threading.Condition()
        self.call = 0  # the number of the running call, 0 between calls
        threading.Thread(target=self._beat, daemon=True).start()

    def _beat(self) -> None:
        me = threading.get_ident() if not hasattr(threading, "get_native_id") else threading.get_native_id()
        with self.cond:
            while True:
                while not self.call:
                    self.cond.wait()
                call = self.call
                self.cond.wait(BEAT)
                if self.call == call:  # the same call still runs
                    done, total = progress.now()
                    beat = {"beat": 1, "done": done, "total": total, "phase": progress.current()}
                    work = progress.work(me)
                    if work is not None:
                        beat["work"] = work
                    frame = encode(beat)
                    try:
                        self.sink.write(frame)
                        self.sink.flush()
                    except (BrokenPipeError, OSError, ValueError):
                        # the controller is gone mid-call: nothing this call does can be answered, and
                        # a call blocked for good (a lock, a FIFO) would keep its lock forever: interrupt
                        # it as Ctrl-C would (a signal ends the blocked system call; its journal finishes
                        # or undoes the change, as after any interruption)
                        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
                        return
                    progress.wrote(len(frame))

    def begin(self, number: int) -> None:
        with self.cond:
            progress.begin()
            self.call = number
            self.cond.notify()

    def answer(self, frame: bytes) -> None:
        with self.cond:
            self.call = 0
            self.cond.notify()
            self.sink.write(frame)
            self.sink.flush()


def serve(agent: Any, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
    """Answer requests {"m": method, "v": [args, kwargs]} until end of input."""
    source: BinaryIO = stdin or sys.stdin.buffer
    sink: BinaryIO = stdout or sys.stdout.buffer
    sys.stdout.flush()  # what the interpreter printed before (a sitecustomize) goes ahead of the magic
    sys.stdout = sys.stderr  # nothing but frames may reach the controller on stdout

    def read_exact(n: int) -> bytes:
        data = source.read(n)
        if len(data) != n:
            raise EOFError
        return data

    # what every command asks first comes with the hello: a held spare has it ready; the magic
    # first, after whatever the interpreter printed before this ran
    sink.write(
        MAGIC
        + encode(
            {"hello": 1},
            {
                "pid": os.getpid(),
                "algorithm": agent.algorithm(),
                "python": "%d.%d.%d" % sys.version_info[:3],
                "hostname": agent.hostname(),
                "interpreter": to_wire(agent.interpreter()),
            },
        )
    )
    sink.flush()
    heart = _Heart(sink)
    calls = 0
    while True:
        try:
            header, call = decode(read_exact)
            args, kwargs = call
        except (EOFError, ValueError, TypeError):  # the end, or not a frame: the wire is no longer usable
            return
        calls += 1
        heart.begin(calls)
        try:
            method = header["m"]
            if method.startswith("_"):
                raise AttributeError(f"no agent method {method!r}")
            result = getattr(agent, method)(*requests_from_wire(method, args), **kwargs)
            frame = encode({"ok": 1}, to_wire(result))
        except Exception as exc:  # every failure goes back to the controller, the loop goes on
            frame = encode({"error": error_doc(exc)})
        try:
            heart.answer(frame)
        except (BrokenPipeError, OSError):  # the connection is gone: nothing left to answer
            return
