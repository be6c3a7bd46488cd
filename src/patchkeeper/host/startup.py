"""Code that runs in the target's interpreter without being imported by name: `.pth` lines, site hooks, plugins.

The fingerprint's `startup` part (standard library only: it runs on the host). Three kinds, each
keyed so that two installs of the same things fingerprint alike (`$SITE/` for a site dir):
- `pth $SITE/NAME.pth`: a .pth file with executable lines (site.py runs every line that begins
  with `import`, in every interpreter started there);
- `sitecustomize PATH` / `usercustomize PATH`: the module `site` imports at start-up, the first one
  on the target's sys.path as site.py builds it (the standard library, then each site dir followed by
  the directories its .pth files add), as an import would find it;
- `entry point GROUP NAME`: an entry point of a group named after the managed package (sglang loads
  `sglang.srt.plugins`, `sglang.srt.platforms`, …: a distribution's code that runs inside it).
"""

from __future__ import annotations

import hashlib
import os
from typing import Any, Dict, List, Optional

from .disk import normalize_name

SITE_TOKEN = "$SITE/"
_HOOKS = ("sitecustomize", "usercustomize")
_LIMIT = 1 << 20  # a start-up file larger than this is digested, not read into the fingerprint


def startup(sites: List[str], stdlib: List[str], managed: Optional[str]) -> Dict[str, Dict[str, Any]]:
    """key -> what it is (see the module's docstring) for every piece of start-up code found:
    .pth files in `sites`, site hooks in `stdlib` (the target's standard library directories) and
    the sites with their .pth directories, and the entry points in `sites` of the groups of the
    package whose dist-info is `managed`."""
    out: Dict[str, Dict[str, Any]] = {}
    path = list(stdlib)
    for site in sites:
        try:
            names = sorted(os.listdir(site))
        except OSError:
            continue
        path.append(site)
        for name in names:
            if name.endswith(".pth"):
                found = _pth(os.path.join(site, name), site, path)
                if found is not None:
                    out.setdefault(f"pth {_portable(os.path.join(site, name), sites)}", found)
    for hook in _HOOKS:
        for directory in path:
            found_hook = _hook(directory or ".", hook)
            if found_hook is not None:
                out[f"{hook} {_portable(found_hook, sites)}"] = {"digest": _digest(found_hook)}
                break
    if managed:
        out.update(plugins(sites, managed[: -len(".dist-info")].rpartition("-")[0] or managed))
    return out


def _pth(path: str, site: str, dirs: List[str]) -> Optional[Dict[str, Any]]:
    """The digest and executable lines of a .pth file that has any, else None; the directories
    it adds are appended to `dirs`, as site.addpackage does."""
    try:
        with open(path, "rb") as f:
            data = f.read(_LIMIT)
    except OSError:
        return None
    for line in data.splitlines():
        if line.strip() and not line.startswith((b"#", b"import ", b"import\t")):
            directory = os.path.join(site, line.rstrip().decode("utf-8", "replace"))
            if os.path.isdir(directory) and directory not in dirs:
                dirs.append(directory)
    lines = [
        line.decode("utf-8", "replace").rstrip()
        for line in data.splitlines()
        if line.startswith((b"import ", b"import\t"))
    ]
    if not lines:
        return None
    return {"digest": "sha256:" + hashlib.sha256(data).hexdigest(), "code": lines}


def _hook(directory: str, module: str) -> Optional[str]:
    """The file an import of `module` would load from `directory`, if any."""
    package = os.path.join(directory, module, "__init__.py")
    if os.path.isfile(package):
        return package
    try:
        names = os.listdir(directory)
    except OSError:
        return None
    for name in sorted(names):
        if (
            name == f"{module}.py"
            or name == f"{module}.pyc"
            or (name.startswith(module + ".") and name.endswith(".so"))
        ):
            return os.path.join(directory, name)
    return None


def plugins(sites: List[str], package: str) -> Dict[str, Dict[str, Any]]:
    """`entry point GROUP NAME` -> {value, dist} for the entry points whose group is named after
    `package` (`<package>.` or `<package>_` first), of every distribution in `sites`."""
    prefix = normalize_name(package)
    out: Dict[str, Dict[str, Any]] = {}
    for site in sites:
        try:
            names = sorted(n for n in os.listdir(site) if n.endswith(".dist-info"))
        except OSError:
            continue
        for dist_info in names:
            try:
                with open(
                    os.path.join(site, dist_info, "entry_points.txt"), encoding="utf-8", errors="replace"
                ) as f:
                    text = f.read(_LIMIT)
            except OSError:
                continue
            group = None
            for line in text.splitlines():
                line = line.strip()
                if line.startswith("[") and line.endswith("]"):
                    name = line[1:-1].strip()
                    group = name if normalize_name(name.split(".")[0]) == prefix else None
                elif group and "=" in line and not line.startswith(("#", ";")):
                    key, _, value = line.partition("=")
                    dist = dist_info[: -len(".dist-info")].replace("-", " ", 1)
                    out.setdefault(
                        f"entry point {group} {key.strip()}", {"value": value.strip(), "dist": dist}
                    )
    return out


def _digest(path: str) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError as exc:
        return f"unreadable: {exc.strerror}"
    return "sha256:" + h.hexdigest()


def _portable(path: str, sites: List[str]) -> str:
    for site in sites:
        base = os.path.join(site, "")
        if path.startswith(base):
            return SITE_TOKEN + path[len(base) :]
    return path
