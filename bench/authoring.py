"""Benchmark: `patchkeeper record` of a 30-file change against `git diff --no-index` of the two trees."""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import PRISTINE, REPO, SITE_REL, row, run  # noqa: E402

FILES = 30
RUNS = 5


def _edit(path: Path, data: bytes) -> None:
    """Replace the file (it is a hardlink into the pristine venv: never write through it)."""
    mode = path.stat().st_mode
    path.unlink()
    path.write_bytes(data)
    path.chmod(mode & 0o7777)


def _change_30_files(site: Path) -> list[str]:
    """Edit 26 files in three places each, add 2, delete 2: a realistic feature branch."""
    sources = sorted(p for p in (site / "sglang/srt").rglob("*.py")
                     if "__pycache__" not in p.parts and p.stat().st_size > 4000)
    picked = sources[:: max(1, len(sources) // FILES)][:FILES - 2]
    touched = []
    for i, path in enumerate(picked):
        rel = path.relative_to(site).as_posix()
        if i < 2:
            path.unlink()
        else:
            lines = path.read_bytes().split(b"\n")
            for at in (len(lines) // 5, len(lines) // 2, len(lines) * 4 // 5):
                lines.insert(at, b"# patched by the benchmark")
            _edit(path, b"\n".join(lines))
        touched.append(rel)
    for i in range(2):
        new = site / f"sglang/srt/bench_added_{i}.py"
        new.write_text("".join(f"VALUE_{n} = {n}\n" for n in range(200)))
        touched.append(new.relative_to(site).as_posix())
    return touched


def main() -> list[dict]:
    if not (PRISTINE / ".done").exists():
        raise SystemExit(f"{PRISTINE} missing: run `make bench`")
    with tempfile.TemporaryDirectory(prefix="pk-bench-authoring-") as tmp:
        tmp = Path(tmp)
        venv = tmp / "venv"
        subprocess.run(["cp", "-al", str(PRISTINE), str(venv)], check=True)
        ws = tmp / "ws"
        ws.mkdir()
        (ws / "patchkeeper.toml").write_text(f'default_target = "t"\n[targets.t]\npython = "{venv}/bin/python"\n'
                                             'package = "sglang"\n')
        pk = [sys.executable, "-m", "patchkeeper", "--workspace", str(ws)]
        subprocess.run([*pk, "snapshot", "--name", "start"], check=True, capture_output=True)
        site = venv / SITE_REL
        touched = _change_30_files(site)

        record, gitdiff = [], []
        for i in range(RUNS):
            record.append(run([*pk, "record", f"bench{i}", "--from", "start"], ok=(0,)))
            gitdiff.append(run(["git", "diff", "--no-index", "--no-renames", "--no-color",
                                  str(PRISTINE / SITE_REL / "sglang"), str(site / "sglang")], ok=(1,)))
        patch = (ws / "patchsets/bench0/bench0.patch").read_bytes()

        # the diff writer alone, in process, over the same 30 pairs of files
        sys.path.insert(0, str(REPO / "src"))
        from patchkeeper.patchset import diffwrite

        pairs = []
        for rel in touched:
            old, new = PRISTINE / SITE_REL / rel, site / rel
            pairs.append(diffwrite.Change(rel, old.read_bytes() if old.exists() else None,
                                          new.read_bytes() if new.exists() else None, 0o644, 0o644))
        writer = []
        for _ in range(RUNS):
            start = time.perf_counter()
            diffwrite.diff(pairs)
            writer.append(time.perf_counter() - start)
        startup = [run([*pk, "--version"], ok=(0,)) for _ in range(RUNS)]
        per_pair = []  # the alternative writer: git itself, one `git diff --no-index` per changed file
        for _ in range(RUNS):
            start = time.perf_counter()
            for rel in touched:
                old, new = PRISTINE / SITE_REL / rel, site / rel
                subprocess.run(["git", "diff", "--no-index", str(old) if old.exists() else "/dev/null",
                                str(new) if new.exists() else "/dev/null"], capture_output=True)
            per_pair.append(time.perf_counter() - start)

    med = statistics.median
    rows = [
        ("patchkeeper record (30 files, CLI end to end)", med(record)),
        ("git diff --no-index pristine edited (peer)", med(gitdiff)),
        ("  of which: diff writer alone, in process", med(writer)),
        ("  of which: python + CLI start (--version)", med(startup)),
        ("  alternative writer: git diff per file pair", med(per_pair)),
    ]
    print(f"authoring: record of a {len(touched)}-file change on sglang 0.5.23 "
          f"({len(patch)} bytes of diff), median of {RUNS}")
    for label, secs in rows:
        print(f"  {label:48} {secs * 1000:8.1f} ms")
    ratio = med(record) / med(gitdiff)
    print(f"  ratio record / git diff --no-index: {ratio:.2f}x (goal <= 2x) {'ok' if ratio <= 2 else 'MISSED'}")
    return [row(f"record of a {len(touched)}-file change", med(record), "git diff --no-index", med(gitdiff), "<= 2x"),
            *(row(label.strip(), secs, "", 0.0, "report") for label, secs in rows[2:])]


if __name__ == "__main__":
    main()
