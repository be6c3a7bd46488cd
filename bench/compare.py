"""Two runs side by side: `python bench/compare.py BEFORE.json AFTER.json` prints a Markdown table of every row."""

from __future__ import annotations

import json
import sys
from typing import Any


def cell(r: dict[str, Any] | None) -> str:
    if r is None:
        return ""
    unit = r["unit"]
    ours = f"{r['ours']:.3f} s" if unit == "s" else f"{r['ours']:.0f} {unit}"
    if r["peer_value"] is not None:
        peer = f"{r['peer_value']:.3f} s" if unit == "s" else f"{r['peer_value']:.0f} {unit}"
        text = f"{r['ratio']:.2f}x ({ours} vs {peer})"
    else:
        text = ours
    cpu = r["note"].split("CPU ", 1)[1].split(",")[-1].strip() if "CPU " in r["note"] else ""
    return text + (f", CPU {cpu}" if cpu and r["peer_value"] else "")


def verdict(r: dict[str, Any] | None) -> str:
    if r is None or r["met"] is None:
        return ""
    return ("met" if r["met"] else "**missed**") if r["kind"] == "goal" else ("ok" if r["met"] else "over")


def main() -> None:
    before, after = (json.loads(open(p).read()) for p in sys.argv[1:3])
    print(
        f"| part | measure | peer | before: {before['about']['commit']} | | after: {after['about']['commit']} | | goal |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for part in ("local", "remote", "fleet", "guards"):
        rows_b = {r["measure"]: r for r in before.get(part, [])}
        for r in after.get(part, []):
            b = rows_b.get(r["measure"])
            goal = (
                ""
                if r["goal"] is None
                else (f"<= {r['goal']:g}x" if r["peer_value"] else f"<= {r['goal']:g} {r['unit']}")
            )
            if r["kind"] == "guard":
                goal += " (guard)"
            print(
                f"| {part} | {r['measure']} | {r['peer']} | {cell(b)} | {verdict(b)} | {cell(r)} | {verdict(r)} | {goal} |"
            )
    for name, run in (("before", before), ("after", after)):
        a = run["about"]
        print(
            f"\n{name}: {a['date']}, commit {a['commit']}, load {a['load_at_start']:.1f} at the start"
            + (f", {a['load_at_end']:.1f} at the end" if "load_at_end" in a else "")
        )


if __name__ == "__main__":
    main()
