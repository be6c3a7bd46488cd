"""`make bench`: every benchmark, each as a ratio against a named peer tool in the same run."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

MODULES = ["core", "audit", "authoring", "remote", "verify", "environment", "ledger"]


def main() -> None:
    only = sys.argv[1:] or MODULES
    results = {}
    for name in only:
        results[name] = importlib.import_module(name).main()
    out = Path(__file__).parent / "results.json"
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"\nfigures written to {out}")


if __name__ == "__main__":
    main()
