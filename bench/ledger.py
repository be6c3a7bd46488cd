"""A long history costs nothing per command: status and apply+rollback with 500 ledger entries against 10."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import PK, copy_venv, print_rows, row, run, workspace  # noqa: E402
from core import apply_rollback, interleaved, prepare  # noqa: E402

LONG = 500


def grow(ledger: Path, total: int) -> None:
    """Repeat the last apply + rollback pair of the ledger until it holds `total` entries: each copy
    with the next seq, an id of its own and a later time, so that every entry's `before` is the
    `after` of the one before it (the pair goes from the baseline and back); a ledger patchkeeper
    itself would have written by as many applies and rollbacks."""
    names = sorted(n for n in os.listdir(ledger) if n.endswith(".json"))
    pair = [json.loads((ledger / n).read_bytes()) for n in names[-2:]]
    assert [e["kind"] for e in pair] == ["apply", "rollback"] and pair[1]["after"]["id"] == pair[0]["before"]["id"]
    seq, when = pair[-1]["seq"], pair[-1]["time"]
    while seq < total:
        for entry in pair:
            seq, when = seq + 1, when + 0.5
            stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(when))
            doc = dict(entry, seq=seq, time=when, id=f"{stamp}-{seq:06x}")
            (ledger / f"{seq:06d}-{doc['id']}.json").write_text(json.dumps(doc, indent=1))


def main() -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="pk-bench-ledger-") as t:
        tmp = Path(t)
        short = workspace(tmp / "ws-short", copy_venv(tmp / "venv-short"))
        long = workspace(tmp / "ws-long", copy_venv(tmp / "venv-long"))
        for ws in (short, long):
            prepare(ws)
            for _ in range(4):  # a baseline, a snapshot and four applies and rollbacks: 10 entries
                apply_rollback(ws)
        grow(tmp / "venv-long" / ".patchkeeper" / "ledger", LONG)
        apply_rollback(long)  # copies the grown entries into the workspace, as their own commands would have
        apply_rollback(short)
        time.sleep(2.5)  # past the racy window of the entries just written
        for ws in (short, long):
            run(PK + ["--workspace", str(ws), "status"])
        counts = [len(os.listdir(tmp / f"venv-{n}" / ".patchkeeper" / "ledger")) for n in ("short", "long")]

        def status(ws: Path) -> float:
            return run(PK + ["--workspace", str(ws), "status"])

        ours, peer = interleaved([lambda: status(long), lambda: status(short)], repeat=15)
        rows.append(row(f"status, {counts[1]} ledger entries", ours, f"the same, {counts[0]} entries", peer, "<= 1.1x"))
        ours, peer = interleaved([lambda: apply_rollback(long), lambda: apply_rollback(short)], repeat=7)
        rows.append(row(f"apply ddtree + rollback, {counts[1]} entries", ours, f"the same, {counts[0]} entries", peer,
                        "<= 1.1x"))
    print_rows("ledger: the cost of a long history", rows)
    return rows


if __name__ == "__main__":
    main()
