"""Write a patch set that changes one line of an installed transformers module (made on the host, for its version).

Usage: one_line_patchset.py WORKSPACE SITE. Writes WORKSPACE/patchsets/tf-one-line/ and prints the patched path.
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path

MODULE = "transformers/utils/versions.py"


def main(argv: list[str]) -> int:
    workspace, site = Path(argv[0]), Path(argv[1])
    version = next(site.glob("transformers-*.dist-info")).name.removesuffix(".dist-info").split("-")[1]
    old = (site / MODULE).read_text()
    lines = old.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith("def require_version("))
    new_lines = (
        lines[:at] + ["# patched by patchkeeper's one-line patch set (a GPU host test)\n"] + lines[at:]
    )
    diff = "".join(difflib.unified_diff(lines, new_lines, f"a/{MODULE}", f"b/{MODULE}"))
    out = workspace / "patchsets" / "tf-one-line"
    out.mkdir(parents=True, exist_ok=True)
    (out / "0001-one-line.patch").write_text(f"diff --git a/{MODULE} b/{MODULE}\n" + diff)
    (out / "patchset.toml").write_text(
        'name = "tf-one-line"\nversion = "1.0.0"\n'
        'description = "One added comment line in transformers/utils/versions.py: apply, audit, roll back"\n'
        f'package = "transformers"\npackage_version = "=={version}"\nrequires = []\ngroup = "gpu-host-test"\n'
    )
    print(MODULE)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
