"""A port left to finish: the scratch directory a blocked `port` writes, read back by `port --continue`.

<workspace>/port/<name>/ holds port.json (what was ported from and to, and each file), files/<path>
(each ported file as the merge made it, diff3 markers where it conflicts: the copy a person edits)
and release/<path> (the new release's bytes, to read: finishing writes and checks the patches
against the wheel's own bytes, verified against its RECORD)."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import BadInput
from .patchset import check_relative
from .port import FilePort

STATE = "port.json"
FILES = "files"
RELEASE = "release"
FORMAT = 1


def scratch_dir(ws_root: Path, name: str) -> Path:
    return ws_root / "port" / name


@dataclass(frozen=True)
class Pending:
    """What port.json says: the patch set it started from, the release it goes to, its files."""

    directory: Path
    name: str
    from_version: str  # the patch set's version ported
    from_digest: str  # ... and its content digest: finishing refuses a patch set changed since
    package: str
    old: str  # the release the patch set was made for
    new: str  # the release it is ported to
    bump: str
    order: tuple[str, ...]  # the patch files, in order
    files: tuple[
        dict[str, Any], ...
    ]  # path (where it lands), origin, patch, kind, outcome, release_mode, new_mode
    wheel: str | None = (
        None  # the new release's wheel as the port found it (finishing re-reads the release there)
    )

    def result(self, path: str) -> bytes | None:
        """The file as the person left it in files/ (None: removed, the ported set deletes it)."""
        return _read(self.directory / FILES, path)

    def release(self, path: str) -> bytes | None:
        return _read(self.directory / RELEASE, path)


def _read(root: Path, path: str) -> bytes | None:
    check_relative(path, str(root))
    target = root / path
    return target.read_bytes() if target.is_file() else None


def write(directory: Path, pending: dict[str, Any], files: tuple[FilePort, ...]) -> None:
    """Write the scratch directory anew (an earlier one of this patch set is replaced)."""
    for f in files:
        check_relative(f.lands, "the ported set")  # a rename's name comes from the wheel
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    (directory / ".gitignore").write_text(
        "# patchkeeper port's scratch directory: not for the workspace history\n*\n"
    )
    entries = []
    for f in files:
        for sub, data in ((FILES, f.result), (RELEASE, f.release)):
            if data is not None:
                path = directory / sub / f.lands
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
        entries.append(
            {
                "path": f.lands,
                "origin": f.path,
                "patch": f.patches[-1],
                "kind": f.kind,
                "outcome": f.outcome,
                "release_mode": f.release_mode,
                "new_mode": f.new_mode,
                "conflicts": f.conflicts,
            }
        )
    doc = {"format": FORMAT, **pending, "files": entries}
    (directory / STATE).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")


def load(ws_root: Path, name: str) -> Pending:
    directory = scratch_dir(ws_root, name)
    path = directory / STATE
    if not path.is_file():
        raise BadInput(
            f"no port of {name} is waiting to be finished ({path} is missing)",
            f"run `patchkeeper port {name} --to VERSION` first",
        )
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if doc.get("format") != FORMAT or doc.get("name") != name:
            raise ValueError(f"not a port of {name} in format {FORMAT}")
        order = [str(o) for o in doc["order"]]
        if any("/" in o or o.startswith(".") or not o.endswith(".patch") for o in order) or any(
            f["patch"] not in order for f in doc["files"]
        ):
            raise ValueError("a patch file name that is not one of the patch set's")
        return Pending(
            directory,
            name,
            str(doc["from_version"]),
            str(doc["from_digest"]),
            str(doc["package"]),
            str(doc["old"]),
            str(doc["new"]),
            str(doc["bump"]),
            tuple(doc["order"]),
            tuple(dict(f) for f in doc["files"]),
            str(doc["wheel"]) if doc.get("wheel") else None,
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise BadInput(
            f"{path} is damaged: {exc}", f"run `patchkeeper port {name} --to VERSION` again"
        ) from None


def remove(ws_root: Path, name: str) -> bool:
    """Remove a finished (or superseded) port's scratch directory; True when there was one."""
    directory = scratch_dir(ws_root, name)
    if not directory.exists():
        return False
    shutil.rmtree(directory)
    parent = directory.parent
    if parent.is_dir() and not any(parent.iterdir()):
        parent.rmdir()
    return True
