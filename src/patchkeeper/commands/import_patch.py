"""`patchkeeper import NAME FILE`: a patch file (or a patchkeeper export) becomes a patch set."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

from ..errors import BadInput
from ..patchset import authoring, exchange, patching, patchset
from ..workspace import Workspace
from .record import default_package, report_saved
import tomllib

_ENC = ("utf-8", "surrogateescape")


def import_patch(ws: Workspace, name: str, file: str, version: str | None, subdir: str,
                 package: str | None, description: str | None) -> int:
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
    parsed = patching.parse(text, file)
    for fp in parsed:
        patchset.check_relative(fp.path, file)
    package = package or default_package(ws)
    _refuse_source_layout([fp.path for fp in parsed], package, file)
    subject = re.search(r"^Subject: (?:\[PATCH[^\]]*\] )?(.+)$", text, re.M)
    draft = authoring.Draft(name=name, package=package, patches=((f"{name}.patch", data),),
                            description=description if description is not None else
                            (subject.group(1).strip() if subject else f"imported from {Path(file).name}"))
    return report_saved(ws, authoring.save(ws.patchsets_dir, draft, version=version), len(patching.parse(text, file)), 0)


def _refuse_source_layout(paths: list[str], package: str, origin: str) -> None:
    """A patch made in a source checkout (python/sglang/...) names no site-packages path: say how to fix it."""
    top = package.replace("-", "_")
    if any(p.split("/", 1)[0] == top for p in paths):
        return
    for p in paths:
        m = re.match(rf"(.+?)/{re.escape(top)}/", p)
        if m:
            raise BadInput(f"{origin}: paths like {p!r} are laid out as in a source checkout, not site-packages",
                           f"pass --subdir {m.group(1)}")


def _strip_subdir(data: bytes, subdir: str, origin: str) -> bytes:
    """Rename a/<subdir>/x to a/x in the diff's path lines (a source checkout's layout to site's)."""
    prefix = subdir.encode() + b"/"
    out = []
    for line in data.split(b"\n"):
        m = re.match(rb"^(diff --git a/)(\S+)( b/)(\S+)$", line) or re.match(rb"^(--- a/|\+\+\+ b/)(.*)$", line)
        if m:
            groups = list(m.groups())
            for i in range(1, len(groups), 2):
                if not groups[i].startswith(prefix):
                    raise BadInput(f"{origin}: path {groups[i].decode(*_ENC)!r} is not below {subdir}/",
                                   "drop --subdir, or make the patch from the package's directory only")
                groups[i] = groups[i][len(prefix):]
            line = b"".join(groups)
        out.append(line)
    return b"\n".join(out)


def _retitled(toml: bytes, name: str, version: str, origin: str) -> bytes:
    """An exported patchset.toml under another name or version: read with tomllib, written by the
    one patchset.toml renderer (authoring.render_toml)."""

    try:
        doc = tomllib.loads(toml.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise BadInput(f"{origin}: its {patchset.MANIFEST} is malformed: {exc}", "export the patch set again") from None
    draft = authoring.Draft(name=name, package=str(doc.get("package", "")), patches=(),
                            roles=tuple((role, str(fname), b"") for role, fname in (doc.get("files") or {}).items()),
                            description=doc.get("description", ""), package_version=doc.get("package_version", ""),
                            requires=tuple(doc.get("requires", ())), group=doc.get("group"))
    return authoring.render_toml(draft, version)


def _import_export(ws: Workspace, name: str, file: str, data: bytes, version: str | None) -> int:
    ident, digest, files = exchange.restore(data, file)
    if patchset.MANIFEST not in files:
        raise BadInput(f"{file}: the export carries no {patchset.MANIFEST}", "export the patch set again")
    with tempfile.TemporaryDirectory() as tmp:  # check the restored bytes are the exported ones
        check = Path(tmp) / ident.partition("@")[0]
        for rel, blob in files.items():
            (check / rel).parent.mkdir(parents=True, exist_ok=True)
            (check / rel).write_bytes(blob)
        if patchset.digest_dir(check) != digest:
            raise BadInput(f"{file}: the restored patch set does not match the digest {digest} in its header",
                           "the patch was edited; strip the '#' header lines to import it as a plain patch")
        shutil.rmtree(check)
    old_name, _, old_version = ident.partition("@")
    if name != old_name or (version is not None and version != old_version):
        files[patchset.MANIFEST] = _retitled(files[patchset.MANIFEST], name, version or old_version, file)
    draft = authoring.Draft(name=name, package="", patches=(), extra_files=tuple(sorted(files.items())))
    saved = authoring.save(ws.patchsets_dir, draft, version=version or old_version)
    paths = patchset.load(ws.patchsets_dir, name).paths
    return report_saved(ws, saved, len(paths), 0)
