"""`patchkeeper import NAME FILE`: a patch file (or a patchkeeper export) becomes a patch set."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from ..errors import BadInput
from ..patchset import authoring, exchange, gitdiff, patchset
from ..workspace import Workspace
from . import answers_json
from .record import default_package, report_saved

_ENC = ("utf-8", "surrogateescape")


_HIGHER = "a higher version: `patchkeeper import NAME FILE --version X.Y.Z`"  # import has no --bump


@answers_json
def import_patch(
    ws: Workspace,
    name: str,
    file: str,
    version: str | None,
    subdir: str,
    package: str | None,
    description: str | None,
    as_json: bool = False,
) -> int:
    authoring.check_name(name)
    try:
        data = Path(file).read_bytes()
    except OSError as exc:
        raise BadInput(f"cannot read {file}: {exc.strerror}", "give the path of a patch file") from None
    if exchange.has_header(data):
        return _import_export(ws, name, file, data, version)
    subdir = subdir.strip("/")
    if subdir:
        data = _strip_subdir(data, subdir, file)
    text = data.decode(*_ENC)
    if not text.strip():
        raise BadInput(f"{file} is empty", "give a patch file made by git diff or git format-patch")
    pieces = _pieces(name, data, file)
    # each piece read as the .patch file it becomes: apply finds its parse remembered (parse_cache.py)
    parsed = tuple(fp for _, piece in pieces for fp in gitdiff.parse(piece.decode(*_ENC), file))
    paths = [p for fp in parsed for p in (fp.source, fp.path) if p is not None]
    for path in paths:
        patchset.check_relative(path, file)
    package = package or default_package(ws)
    _refuse_source_layout(paths, package, file)
    subject = re.search(r"^Subject: (?:\[PATCH[^\]]*\] )?(.+)$", text, re.M)
    draft = authoring.Draft(
        name=name,
        package=package,
        patches=pieces,
        description=description
        if description is not None
        else (subject.group(1).strip() if subject else f"imported from {Path(file).name}"),
    )
    saved = authoring.save(ws.patchsets_dir, draft, version=version, version_option=_HIGHER)
    return report_saved(ws, saved, len(parsed), 0)


def _pieces(name: str, data: bytes, origin: str) -> tuple[tuple[str, bytes], ...]:
    """The patch as NAME.patch, or, over the size a .patch may hold, cut between files into
    NAME-001.patch, NAME-002.patch, ... (applied in name order; exported joined again, byte for byte)."""
    if len(data) <= patchset.MAX_PATCH:
        return ((f"{name}.patch", data),)
    pieces: list[list[bytes]] = []
    size = 0
    for section in gitdiff.sections(data):
        if len(section) > patchset.MAX_PATCH:
            first = section.split(b"\n", 1)[0].decode(*_ENC)
            raise BadInput(
                f"{origin}: one file's diff (from one `diff --git` line to the next) holds {len(section)} "
                f"bytes, over the {patchset.MAX_PATCH >> 20} MiB a .patch may hold ({first[:100]})",
                "ship such a file another way, or leave it out of the diff (git diff: import cuts "
                "between its files)",
            )
        if pieces and size + len(section) <= patchset.MAX_PATCH:
            pieces[-1].append(section)
            size += len(section)
        else:
            pieces.append([section])
            size = len(section)
    width = max(3, len(str(len(pieces))))
    return tuple((f"{name}-{i:0{width}d}.patch", b"".join(piece)) for i, piece in enumerate(pieces, 1))


def _refuse_source_layout(paths: list[str], package: str, origin: str) -> None:
    """A patch made in a source checkout (python/sglang/...) names no site-packages path: say how to fix it."""
    top = package.replace("-", "_")
    if any(p.split("/", 1)[0] == top for p in paths):
        return
    for p in paths:
        m = re.match(rf"(.+?)/{re.escape(top)}/", p)
        if m:
            raise BadInput(
                f"{origin}: paths like {p!r} are laid out as in a source checkout, not site-packages",
                f"pass --subdir {m.group(1)}",
            )


def _strip_subdir(data: bytes, subdir: str, origin: str) -> bytes:
    """Rename a/<subdir>/x to a/x in the diff's path lines (a source checkout's layout to site's)."""
    prefix = subdir.encode() + b"/"
    out = []
    for line in data.split(b"\n"):
        m = (
            re.match(rb"^(diff --git a/)(\S+)( b/)(\S+)$", line)
            or re.match(rb"^(--- a/|\+\+\+ b/)(.*)$", line)
            or re.match(rb"^((?:rename|copy) (?:from|to) )(.*)$", line)
        )
        if m:
            groups = list(m.groups())
            for i in range(1, len(groups), 2):
                if not groups[i].startswith(prefix):
                    raise BadInput(
                        f"{origin}: path {groups[i].decode(*_ENC)!r} is not below {subdir}/",
                        "drop --subdir, or make the patch from the package's directory only",
                    )
                groups[i] = groups[i][len(prefix) :]
            line = b"".join(groups)
        out.append(line)
    return b"\n".join(out)


def _import_export(ws: Workspace, name: str, file: str, data: bytes, version: str | None) -> int:
    ident, digest, files = exchange.restore(data, file)
    if patchset.MANIFEST not in files:
        raise BadInput(f"{file}: the export carries no {patchset.MANIFEST}", "export the patch set again")
    # the restored bytes are the exported ones (digest_files: the digest of the directory they make);
    # then the patch set as it will be saved is written once, in a directory of its own made here and
    # removed whole (exchange.restore checked every name; no path is built from the export's ident),
    # and loaded there exactly as the workspace would load it: whatever loading refuses (a diff's path,
    # a role file, patchset.toml) is refused before anything is saved
    if patchset.digest_files(files) != digest:
        raise BadInput(
            f"{file}: the restored patch set does not match the digest {digest} in its header",
            "the patch was edited; strip the '#' header lines to import it as a plain patch",
        )
    files = _renamed(files, ident, name, version, file)
    with tempfile.TemporaryDirectory(prefix="pk-import-") as tmp:
        staged = Path(tmp)
        _restore_into(staged / name, files, file)
        try:
            patchset.load(staged, name)
        except BadInput as exc:
            raise BadInput(
                f"{file}: " + exc.message.replace(str(staged / name), f"the export's patch set {ident}"),
                "nothing was saved; fix the patch set where it was made, then export it again",
            ) from None
    draft = authoring.Draft(name=name, package="", patches=(), extra_files=tuple(sorted(files.items())))
    saved = authoring.save(
        ws.patchsets_dir, draft, version=version or ident.partition("@")[2], version_option=_HIGHER
    )
    paths = patchset.load(ws.patchsets_dir, name).paths
    return report_saved(ws, saved, len(paths), 0)


def _restore_into(directory: Path, files: dict[str, bytes], origin: str) -> None:
    """The export's files (names checked by exchange.restore) written below `directory`, a temporary one."""
    try:
        for rel, blob in files.items():
            (directory / rel).parent.mkdir(parents=True, exist_ok=True)
            (directory / rel).write_bytes(blob)
    except OSError as exc:
        raise BadInput(
            f"{origin}: cannot restore the export's files in {directory}: {exc.strerror}",
            "make room in the temporary directory ($TMPDIR), then import again",
        ) from None


def _renamed(
    files: dict[str, bytes], ident: str, name: str, version: str | None, origin: str
) -> dict[str, bytes]:
    """The export's files, its patchset.toml naming `name` and `version` where they differ from its ident."""
    old_name, _, old_version = ident.partition("@")
    if name == old_name and (version is None or version == old_version):
        return files
    try:
        toml = files[patchset.MANIFEST].decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(
            f"{origin}: its {patchset.MANIFEST} is not UTF-8", "export the patch set again"
        ) from None
    renamed = authoring.set_keys(toml, {"name": name, "version": version or old_version}).encode()
    return {**files, patchset.MANIFEST: renamed}
