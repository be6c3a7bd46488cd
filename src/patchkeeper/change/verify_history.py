"""A verification against the target's own history: the last pass of the same code state (is this one
a regression?), and the last greedy output asked the same way (has the output changed?)."""

from __future__ import annotations

from typing import Any, cast

from ..records.ledger import Ledger, State, VerifyExtra
from .service import ServiceConfig
from .smoke import Check

MIN_SLOWER = (
    1.0  # seconds a regression must add too, so a server answering in milliseconds is not judged by jitter
)
MIN_SLOWER_READY = (
    30.0  # the same for the ready time, which a cold page cache alone can stretch by tens of seconds
)


def smoke_key(svc: ServiceConfig, model: str | None) -> dict[str, Any]:
    """What makes two greedy outputs comparable (the model: as configured, else the one the server listed)."""
    return {
        "prompt": svc.smoke.prompt,
        "model": svc.smoke.model or model,
        "max_tokens": svc.smoke.max_tokens,
        "endpoint": svc.smoke.endpoint,
    }


def last_pass(ledger: Ledger, state: State | None) -> dict[str, Any] | None:
    """The figures of the newest passing verification of `state` (ready seconds, smoke seconds, tokens/s)."""
    if state is None:
        return None
    for e in ledger.entries().newest(state.id, "verify"):
        report = cast(VerifyExtra, e.extra).get("verify")
        if report and report.get("ok") and report.get("seconds") is not None:
            names = {c["name"]: c for c in report.get("checks", ())}
            ready = names["ready"]["seconds"] if "restart" in names and "ready" in names else None
            return {
                "entry": e.id,
                "time": e.time,
                "seconds": report["seconds"],
                "tokens": report.get("tokens"),
                "tokens_per_s": report.get("tokens_per_s"),
                "ready": ready,
            }
    return None


def last_output(ledger: Ledger, key: dict[str, Any]) -> dict[str, Any] | None:
    """The greedy output of the newest passing verification, of any code state, that asked the same
    (prompt, model, max_tokens, endpoint): its entry, state and text."""
    if not key:
        return None
    entries = ledger.entries()
    for i in reversed(range(len(entries))):
        if entries.slots[i].kind != "verify":
            continue
        e = entries[i]
        report = cast(VerifyExtra, e.extra).get("verify") or {}
        if report.get("ok") and report.get("output") is not None and report.get("smoke") == key:
            return {"entry": e.id, "state": e.after.id, "output": report["output"]}
    return None


def history_check(
    then: dict[str, Any], now: dict[str, Any], ready_now: float | None, svc: ServiceConfig
) -> Check:
    """The `history` check: no regression (`regression`) against `then`, the last pass of this code
    state (`last_pass`)."""
    slower = regression(then, now, ready_now, svc)
    if slower:
        return Check("history", False, 0.0, "; ".join(slower), reason="regression")
    return Check(
        "history",
        True,
        0.0,
        f"within max_slowdown = {svc.smoke.max_slowdown:g} "
        f"of the last pass of this state ({_figures_text(then)})",
    )


def _figures_text(f: dict[str, Any]) -> str:
    rate = f" ({f['tokens_per_s']:.1f} tokens/s)" if f.get("tokens_per_s") else ""
    ready = f", ready after {f['ready']:.2f} s" if f.get("ready") is not None else ""
    return f"smoke request {f['seconds']:.2f} s{rate}{ready}"


def regression(
    then: dict[str, Any], now: dict[str, Any], ready_now: float | None, svc: ServiceConfig
) -> list[str]:
    """What is over max_slowdown times slower than the last pass (and at least MIN_SLOWER seconds more;
    MIN_SLOWER_READY for the ready time after a restart)."""
    limit, out = svc.smoke.max_slowdown, []
    pairs = [("the smoke request", then.get("seconds"), now.get("seconds"), MIN_SLOWER)]
    if ready_now is not None:
        pairs.append(("ready after restart", then.get("ready"), ready_now, MIN_SLOWER_READY))
    for what, old, new, floor in pairs:
        if old is None or new is None or new <= limit * old or new - old < floor:
            continue
        rates = ""
        if what == "the smoke request" and then.get("tokens_per_s") and now.get("tokens_per_s"):
            rates = f", {then['tokens_per_s']:.1f} then, {now['tokens_per_s']:.1f} tokens/s now"
        out.append(
            f"{what}: {_secs(old)} then, {_secs(new)} now ({new / old:.1f}x, over max_slowdown = "
            f"{limit:g}{rates}) for the same code state, last passed in {then['entry']}"
        )
    return out


def _secs(s: float) -> str:
    return f"{s:.3g} s" if s < 100 else f"{s:.0f} s"
