"""Check patchkeeper's native section against the real loader: dlopen each library with a soname patchkeeper could not resolve.

Usage: native_load.py ENV.json [PRELOAD_MODULE]. For every shared object that `env --json` lists with an
unresolved soname: dlopen it in a fresh interpreter (standalone), and in one interpreter that imported
PRELOAD_MODULE (default torch) first. Prints one JSON document: standalone / only after the preload /
not at all, and how many objects resolved all their sonames.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

TRY = "import ctypes, sys\ntry:\n    ctypes.CDLL(sys.argv[1])\nexcept OSError as e:\n    print(str(e)[:300]); sys.exit(1)\n"
AFTER = (
    "import ctypes, json, sys, importlib\nimportlib.import_module(sys.argv[1])\nout = {}\n"
    "for p in sys.argv[2:]:\n    try:\n        ctypes.CDLL(p); out[p] = None\n"
    "    except OSError as e:\n        out[p] = str(e)[:300]\nprint(json.dumps(out))\n"
)


LIMIT = 300  # objects tried, at about 50 ms each


def main(argv: list[str]) -> int:
    doc = json.load(open(argv[0]))
    preload = argv[1] if len(argv) > 1 else "torch"
    sites = doc["where"]["sites"]
    native = doc["native"]
    unresolved = {
        rel: sorted(so for so, ident in info["resolved"].items() if ident is None)
        for rel, info in native.items()
        if any(ident is None for ident in info["resolved"].values())
    }

    def full(rel: str) -> str:
        return (
            rel
            if rel.startswith("/")
            else next((os.path.join(s, rel) for s in sites if os.path.exists(os.path.join(s, rel))), rel)
        )

    standalone, failed = [], {}
    for rel in sorted(unresolved)[:LIMIT]:
        proc = subprocess.run(
            [sys.executable, "-c", TRY, full(rel)], capture_output=True, text=True, timeout=120
        )
        (standalone.append(rel) if proc.returncode == 0 else failed.__setitem__(rel, proc.stdout.strip()))
    after, never = [], {}
    if failed:
        proc = subprocess.run(
            [sys.executable, "-c", AFTER, preload, *map(full, sorted(failed))],
            capture_output=True,
            text=True,
            timeout=600,
        )
        results = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {}
        for rel in sorted(failed):
            err = results.get(full(rel), f"the preload failed: {proc.stderr.strip()[-300:]}")
            (after.append(rel) if err is None else never.__setitem__(rel, err))
    print(
        json.dumps(
            {
                "objects": len(native),
                "all_resolved": len(native) - len(unresolved),
                "with_unresolved": len(unresolved),
                "tried": min(LIMIT, len(unresolved)),
                "unresolved_sonames": unresolved,
                "loads_standalone": standalone,
                f"loads_only_after_import_{preload}": after,
                "loads_not_at_all": never,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
