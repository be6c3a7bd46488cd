"""The releases' code digests for `audit --rehash`: what each source of the release wheels of the target's
distributions compiles to (those the workspace's wheels directory holds), so that a host compiles none of
the sources it holds unchanged (host/pycompare.py, Compared.release).

Compiling every source is the dearest part of a first `--rehash` on a host (the bare sglang venv: 77 MB of
sources, 10 s of CPU). The release's sources are the same bytes on every host of a fleet, so this machine
compiles them once per wheel and interpreter, keeps the digests in the user cache (`release-code/`) and
places them beside each target's compared pairs; a pyc whose code, its file names blanked, has the digest
its source's sha256 names holds the release's code, without a compile on the host.

Trust: an entry says what a source's bytes compile to, computed here, in an interpreter of this machine
(the target's own for a local target; for an SSH target, this one or the `pythonX.Y` of its version
on PATH: the host uses the table only under its own magic number). Whatever wheel it came from, an entry is a fact
about those bytes, so a wrong wheel costs compiles, never a pyc wrongly believed. A host's own answers
never enter it: a host that lied could otherwise vouch for a foreign pyc on every other host.
"""

from __future__ import annotations

import hashlib
import marshal
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..host.disk import normalize_name
from ..host.pycompare import RELEASE_BUILDER, Compared, cores, ended
from ..host.statcache import read_cache, save_cache, user_cache
from ..targets import Target
from .wheels import wheel_name_version


def place(target: Target, wheels_dir: Path | None, compared: str) -> int:
    """Put the code digests of the target's releases, every distribution of its site-packages whose wheel
    the workspace's wheels directory holds (the package's, and any other's), beside `compared` on the
    target; the number of sources they cover, 0 when there is no such wheel or no interpreter to compile
    with (the host then compiles, as without them)."""
    found = _wheels(target, wheels_dir)
    python = _interpreter(target) if found else None
    if python is None:
        return 0
    tables = [_table(wheel, python) for wheel in found]
    stamps = {stamp for stamp, _ in (t for t in tables if t is not None)}
    if len(stamps) != 1:  # none made, or interpreters that disagree: none placed
        return 0
    merged = {k: v for t in tables if t is not None for k, v in t[1].items()}
    target.agent.write_atomic(compared + ".release", marshal.dumps((stamps.pop(), merged)), 0o600)
    return len(merged)


def _wheels(target: Target, wheels_dir: Path | None) -> list[Path]:
    """The wheel of each distribution installed in the target's site-packages, where the directory holds one."""
    if wheels_dir is None or not wheels_dir.is_dir():
        return []
    named: dict[tuple[str, str], Path] = {}
    for path in sorted(wheels_dir.glob("*.whl")):
        nv = wheel_name_version(path)
        if nv is not None:
            named.setdefault(nv, path)
    found = []
    for dist_info in target.agent.dist_infos(target.info.site):
        name, _, version = dist_info.removesuffix(".dist-info").rpartition("-")
        wheel = named.get((normalize_name(name), version))
        if wheel is not None:
            found.append(wheel)
    return found


def _interpreter(target: Target) -> str | None:
    """An interpreter of this machine that compiles as the target's does (see the module's trust): a
    local target's own; for an SSH target, this one or `pythonX.Y` on PATH, of the host's version."""
    if target.config.ssh is None:
        return target.config.python
    major_minor = ".".join(target.info.python_version.split(".")[:2])
    if major_minor == "%d.%d" % sys.version_info[:2] and sys.executable:
        return sys.executable
    return shutil.which(f"python{major_minor}")


def _table(wheel: Path, python: str) -> tuple[Any, dict[bytes, bytes]] | None:
    """(Compared.RELEASE as `python` has it, the table) for `wheel` compiled by `python`, from the
    user cache or made now on every core; None when the interpreter cannot make them."""
    # by the identities of the wheel and the interpreter, not a digest of the wheel (torch's is 800 MB):
    # any table holds true entries whatever its key, since each names the source bytes it was made from
    ids = [(os.path.realpath(p), os.stat(p)) for p in (str(wheel), python)]
    key = hashlib.sha256(
        repr([(path, st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev) for path, st in ids]).encode()
    ).hexdigest()[:32]
    cached = user_cache(f"release-code/{key}")
    data = read_cache(cached)
    if data is not None:
        try:
            stamp, table = marshal.loads(data)
            return stamp, table
        except (ValueError, EOFError, TypeError):
            pass  # damaged: made again
    step = cores()
    sys.stderr.write(  # the long part of a first --rehash with many wheels: said as it happens
        f"patchkeeper: audit: compiling the sources of {wheel.name} once on this machine, on {step} "
        "core(s), for their code digests (kept in your user cache)\n"
    )
    sys.stderr.flush()
    procs: list[subprocess.Popen[bytes]] = []
    parts = []
    try:
        for i in range(step):
            procs.append(
                subprocess.Popen(
                    [python, "-I", "-c", RELEASE_BUILDER, str(wheel), str(i), str(step)],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                )
            )
        for proc in procs:
            out, _ = proc.communicate()
            if proc.returncode != 0:
                return None
            parts.append(marshal.loads(out))
    except (OSError, ValueError, EOFError):  # no such interpreter, or it printed something else
        return None
    finally:
        ended(procs)
    stamps = {stamp for stamp, _ in parts}
    if len(stamps) != 1 or next(iter(stamps))[:2] != Compared.RELEASE[:2]:
        return None
    table = {k: v for _, part in parts for k, v in part.items()}
    stamp = next(iter(stamps))
    save_cache(cached, stamp, table)
    return stamp, table
