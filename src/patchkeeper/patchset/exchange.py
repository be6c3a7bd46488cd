"""One patch file for a whole patch set: `#` header lines (which git apply and patch -p1 skip)
carry patchset.toml and the role files byte for byte, then the diffs follow as they are stored."""

from __future__ import annotations

import json
import re
from pathlib import Path

from .. import names
from ..errors import BadInput

MAGIC = "# patchkeeper-export 1"
_TEXT = "#| "


def export(directory: Path, ident: str, digest: str, notes: tuple[str, ...] = ()) -> bytes:
    """The patch set in `directory` as one patch, restorable exactly by `restore`; `notes` become comment lines."""
    files = sorted(p for p in directory.rglob("*") if p.is_file())
    rels = [p.relative_to(directory).as_posix() for p in files]
    head = [
        f"{MAGIC} {ident} {digest}",
        "# `patchkeeper import NAME FILE` restores this patch set exactly from the lines starting with '#';",
        "# `git apply` and `patch -p1` in site-packages skip them and apply the diffs below.",
        *(f"# {note}" for note in notes),
    ]
    body: list[bytes] = []
    for path, rel in zip(files, rels):
        data = path.read_bytes()
        if "/" not in rel and rel.endswith(".patch"):
            head.append(f"# patch {json.dumps(rel)} {len(data)}")
            body.append(data if data.endswith(b"\n") or not data else data + b"\n")
        else:
            head.append(f"# file {json.dumps(rel)} {len(data)}")
            head.extend(_TEXT + piece for piece in data.decode("utf-8", "surrogateescape").split("\n"))
    head.append("# end")
    return ("\n".join(head) + "\n").encode("utf-8", "surrogateescape") + b"".join(body)


def has_header(data: bytes) -> bool:
    return data.startswith(MAGIC.encode())


def restore(data: bytes, origin: str) -> tuple[str, str, dict[str, bytes]]:
    """(ident, digest, files) from an export; BadInput when it was cut or altered. The ident is a
    patch set's NAME@VERSION and every file a plain relative name (names.py): checked here, before
    anyone makes a path of them."""
    lines = data.split(b"\n")
    first = lines[0].decode("utf-8", "surrogateescape").split(" ")
    if len(first) != 5:
        raise BadInput(f"{origin}: malformed patchkeeper header line", "export the patch set again")
    ident, digest = first[3], first[4]
    names.check_ident(ident, f"{origin}: the export's header")
    names.check_digest(digest, f"{origin}: the export's header")
    files: dict[str, bytes] = {}
    patches: list[tuple[str, int]] = []
    taken: tuple[set[str], set[str]] = (set(), set())  # the files named so far, their directories
    i = 1
    current: tuple[str, int] | None = None
    pieces: list[str] = []

    def close() -> None:
        if current is not None:
            blob = "\n".join(pieces).encode("utf-8", "surrogateescape")
            if len(blob) != current[1]:
                raise BadInput(
                    f"{origin}: file {current[0]} in the header has {len(blob)} bytes, {current[1]} expected",
                    "the header was altered; export again",
                )
            files[current[0]] = blob

    while True:
        if i >= len(lines):
            raise BadInput(f"{origin}: the patchkeeper header has no end line", "export the patch set again")
        line = lines[i].decode("utf-8", "surrogateescape")
        i += 1
        if line.startswith(_TEXT) or line == _TEXT.rstrip():
            if current is None:
                raise BadInput(f"{origin}: header text outside a file", "export the patch set again")
            pieces.append(line[len(_TEXT) :])
            continue
        close()
        current, pieces = None, []
        if line == "# end":
            break
        m = re.fullmatch(r"# (file|patch) (\".*\") (\d+)", line)
        if m is None:
            if line.startswith("# "):
                continue  # a comment line
            raise BadInput(f"{origin}: unexpected header line {line[:60]!r}", "export the patch set again")
        try:
            rel, size = json.loads(m.group(2)), int(m.group(3))
        except ValueError:
            raise BadInput(
                f"{origin}: malformed header line {line[:60]!r}", "export the patch set again"
            ) from None
        names.check_file_entry(rel, f"{origin}: the export's header")
        if m.group(1) == "patch" and ("/" in rel or not rel.endswith(".patch")):
            raise BadInput(f"{origin}: patch entry {rel!r} is not a NAME.patch", "export the patch set again")
        _refuse_clash(rel, taken, origin)
        if m.group(1) == "file":
            current = (rel, size)
        else:
            patches.append((rel, size))
    rest = b"\n".join(lines[i:])
    pos = 0
    for rel, size in patches:
        chunk = rest[pos : pos + size]
        if len(chunk) != size:
            raise BadInput(f"{origin}: the diffs end before {rel} does", "the patch was cut; export again")
        files[rel] = chunk
        pos += size
        if size and not chunk.endswith(b"\n"):
            pos += 1
    if rest[pos:].strip():
        raise BadInput(
            f"{origin}: {len(rest) - pos} bytes follow the last diff the header names",
            "the patch was altered; strip the '#' header lines to import it as a plain patch",
        )
    return ident, digest, files


def _refuse_clash(rel: str, taken: tuple[set[str], set[str]], origin: str) -> None:
    """A name given twice, or a file that is another's directory, restores no patch set."""
    files, dirs = taken
    parents = ["/".join(rel.split("/")[:k]) for k in range(1, rel.count("/") + 1)]
    if rel in files or rel in dirs or any(p in files for p in parents):
        raise BadInput(
            f"{origin}: the export's header names {rel!r} twice, or as a file and a directory",
            "export the patch set again",
        )
    files.add(rel)
    dirs.update(parents)
