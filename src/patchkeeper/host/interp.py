"""Facts about the Python running this module: implementation, version, tags, libc, site dirs.

Self-contained (standard library, no package imports) so it can run as `python -I -c <source>`
in a local target's own interpreter, printing its facts as JSON; a remote agent, which already
runs in the target's interpreter, calls `facts()` directly.
"""

import json
import os
import platform
import sys
import sysconfig
from typing import Any, Dict, List


def _libc() -> Dict[str, str]:
    try:
        name, _, version = (os.confstr("CS_GNU_LIBC_VERSION") or "").partition(" ")
        if name and version:
            return {"name": name, "version": version}
    except (ValueError, OSError, AttributeError):
        pass
    try:
        name, version = platform.libc_ver()
    except OSError:
        name, version = "", ""
    return {"name": name or "unknown", "version": version or "unknown"}


def site_dirs() -> List[str]:
    """The site directories on sys.path (the interpreter's own, not the caller's environment)."""
    seen: List[str] = []
    for p in sys.path:
        if os.path.basename(p.rstrip("/")) in ("site-packages", "dist-packages") and os.path.isdir(p):
            real = os.path.realpath(p)
            if real not in [os.path.realpath(s) for s in seen]:
                seen.append(p)
    return seen


def facts() -> Dict[str, Any]:
    impl = sys.implementation.name
    short = {"cpython": "cp", "pypy": "pp"}.get(impl, impl)
    nodot = "%d%d" % sys.version_info[:2]
    soabi = sysconfig.get_config_var("SOABI") or ""
    parts = soabi.split("-")
    if len(parts) > 1 and parts[0] == "cpython":  # cpython-311-x86_64-linux-gnu, cpython-313t-...
        abi = "cp" + parts[1]
    else:
        abi = soabi.replace("-", "_").replace(".", "_") or "none"
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return {
        "implementation": impl,
        "version": platform.python_version(),
        "tags": {
            "interpreter": short + nodot,
            "abi": abi,
            "platform": plat,
            "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX") or "",
        },
        "machine": platform.machine(),
        "libc": _libc(),
        "where": {
            "executable": sys.executable,
            "prefix": sys.prefix,
            "sites": site_dirs(),
            "stdlib": list(dict.fromkeys([sysconfig.get_path("stdlib"), sysconfig.get_path("platstdlib")])),
        },
    }


if __name__ == "__main__":
    print(json.dumps(facts()))
