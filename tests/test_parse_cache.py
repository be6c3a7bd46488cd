"""A large diff is read by unidiff once: the next process loads the parse from the user cache
(parsed/<digest>.marshal), the same file patches; a damaged cache file is read again, never believed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PROBE = """
import json, sys
from patchkeeper.patchset import gitdiff
text = open(sys.argv[1], encoding="utf-8", errors="surrogateescape").read()
fps = gitdiff.parse(text, "big.patch")
print(json.dumps({"read_by_unidiff": "unidiff.patch" in sys.modules,
                  "patches": [[f.path, f.kind, [list(h.new_lines) for h in f.hunks]] for f in fps]}))
"""


def _big_diff() -> str:
    body = "".join(f"+VALUE_{i} = {i}\n" for i in range(400))
    return "".join(
        f"diff --git a/pkg/m{n}.py b/pkg/m{n}.py\nnew file mode 100644\nindex 0000000..1111111\n"
        f"--- /dev/null\n+++ b/pkg/m{n}.py\n@@ -0,0 +1,400 @@\n{body}"
        for n in range(12)
    )


def _parse(patch: Path, cache: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(patch)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "XDG_CACHE_HOME": str(cache)},
    ).stdout
    return json.loads(out)


def test_a_large_diff_is_parsed_once_then_loaded(tmp_path):
    patch = tmp_path / "big.patch"
    patch.write_text(_big_diff())
    assert patch.stat().st_size > 64 << 10
    first = _parse(patch, tmp_path / "cache")
    assert first["read_by_unidiff"] and len(first["patches"]) == 12
    kept = list((tmp_path / "cache" / "patchkeeper" / "parsed").glob("*.marshal"))
    assert len(kept) == 1 and kept[0].stat().st_mode & 0o777 == 0o600
    second = _parse(patch, tmp_path / "cache")
    assert not second["read_by_unidiff"] and second["patches"] == first["patches"]

    kept[0].write_bytes(kept[0].read_bytes()[:100])  # cut short: not believed, read again
    third = _parse(patch, tmp_path / "cache")
    assert third["read_by_unidiff"] and third["patches"] == first["patches"]

    patch.write_text(_big_diff().replace("VALUE_7 ", "VALUE_SEVEN "))  # another text, another parse
    other = _parse(patch, tmp_path / "cache")
    assert other["read_by_unidiff"] and other["patches"] != first["patches"]
