"""Agreement with `git apply` on the corpus of tests/gitapply_damage.py: how many cases agree, and each
kind of disagreement, with a case that runs past a time limit counted as a hang (a measurement, not a
test: the tests bound the work instead). Run from a checkout: `.venv/bin/python bench/gitapply_agreement.py`;
PYTHONPATH=<another checkout's src> measures that code on the same corpus."""

from __future__ import annotations

import collections
import signal
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import gitapply_corpus  # noqa: E402 (tests/ is not a package)
import gitapply_damage  # noqa: E402

LIMIT = 2  # seconds a case may take before it counts as a hang


class _Hang(Exception):
    pass


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise _Hang


def main() -> int:
    signal.signal(signal.SIGALRM, _alarm)
    work = Path(tempfile.mkdtemp(prefix="pk-agreement-"))
    cases = gitapply_damage.corpus(work / "made")
    counts: collections.Counter[str] = collections.Counter()
    shown: dict[str, list[str]] = collections.defaultdict(list)
    forms: collections.Counter[str] = collections.Counter()
    started = time.perf_counter()
    for i, case in enumerate(cases):
        signal.alarm(LIMIT)
        try:
            verdict = gitapply_corpus.judge(case, work / str(i))
            kind, why = verdict.kind, verdict.apply.why
        except _Hang:
            kind, why = "hang", ""
        except Exception as exc:  # a traceback patchkeeper would show its user
            kind, why = "traceback", repr(exc)[:160]
        finally:
            signal.alarm(0)
        counts[kind] += 1
        if kind == "documented refusal":
            forms[gitapply_corpus.documented(why) or "?"] += 1
        if kind != "agree":
            shown[kind].append(f"{case.name}: {why[:160]}")
    print(f"{len(cases)} cases in {time.perf_counter() - started:.1f} s")
    for kind, n in counts.most_common():
        print(f"{n:6d}  {kind}")
    for form, n in forms.most_common():
        print(f"        {n:6d}  refused as documented: {form}")
    for kind, names in shown.items():
        print(f"\n{kind}:")
        for line in names[:40]:
            print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
