"""Judging what a service did: its completions (count, rate, variety), the speculation /server_info says
runs, and whether its greedy output is the one the last pass gave; each judgement one Check."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ..checks import units
from .service import ServiceConfig

SAMPLE_CHARS = 200
_TOKEN = re.compile(r"\w+|[^\w\s]")
_ALIASES = {
    "NEXTN": "EAGLE"
}  # sglang resolves --speculative-algorithm NEXTN to EAGLE (spec_registry's alias)
_SAME = {("EAGLE", "FROZEN_KV_MTP")}  # NEXTN/EAGLE with a Gemma4 assistant draft is promoted to FROZEN_KV_MTP


@dataclass(frozen=True)
class Check:
    """One step of a verification: restart, ready, server, generate, algorithm, accept, output or history."""

    name: str
    ok: bool
    seconds: float
    detail: str
    output: str = ""
    skipped: bool = False  # the check could not be made (said why in detail); it neither passed nor failed
    reason: str | None = None  # a failed check's reason (stale-server, algorithm, output-changed...)
    warned: bool = False  # passed, with something the report shows (a restart's warning, other greedy output)


# ---- one completion ------------------------------------------------------------------------------
def count_tokens(text: str) -> int:
    """A tokenizer-free estimate, used only when the server reports no usage."""
    return len(_TOKEN.findall(text))


def degenerate(text: str) -> str | None:
    """Why the output is degenerate (one char or token over most of it, too few distinct tokens)."""
    if not text.strip():
        return "the output is empty or only whitespace"
    chars = [c for c in text if not c.isspace()]
    if len(chars) >= 8:
        char, n = Counter(chars).most_common(1)[0]
        if n / len(chars) >= 0.8:
            return f"one character, {char!r}, is {n / len(chars):.0%} of the output"
    tokens = _TOKEN.findall(text)
    if len(tokens) >= 8:
        token, n = Counter(tokens).most_common(1)[0]
        if n / len(tokens) >= 0.6:
            return f"one token, {token!r}, is {n / len(tokens):.0%} of the output"
    if len(tokens) >= 32 and len(set(tokens)) / len(tokens) < 0.12:
        return (
            f"only {len(set(tokens))} distinct tokens in {len(tokens)} ({len(set(tokens)) / len(tokens):.0%})"
        )
    return None


def judge(gen: dict[str, Any], svc: ServiceConfig) -> tuple[Check, dict[str, Any]]:
    """The generate check of one completion, and its figures (tokens, seconds, tokens_per_s, sample,
    output, problems, reason)."""
    smoke = svc.smoke
    secs = float(gen.get("seconds") or 0.0)
    if gen.get("error"):
        reason = "timeout" if gen.get("timed_out") else "error"
        what = f"{gen.get('url')}: {gen['error']}"
        if reason == "timeout":
            what = f"no completion from {gen.get('url')} within {smoke.timeout:g}s"
        return (
            Check("generate", False, secs, what, reason=reason),
            {"reason": reason, "problems": (what,), "seconds": secs},
        )
    text = gen.get("text") or ""
    reported = gen.get("completion_tokens")
    tokens = reported if isinstance(reported, int) else count_tokens(text)
    rate = tokens / secs if secs > 0 else float("inf")
    problems: list[tuple[str, str]] = []
    if tokens < smoke.min_tokens:
        problems.append(("few-tokens", f"only {tokens} token(s), fewer than min_tokens = {smoke.min_tokens}"))
    if rate < smoke.min_tokens_per_s:
        problems.append(("slow", f"{rate:.1f} tokens/s, below min_tokens_per_s = {smoke.min_tokens_per_s:g}"))
    bad = degenerate(text)
    if bad:
        problems.append(("degenerate", f"degenerate output: {bad}"))
    detail = f"{tokens} tokens in {secs:.2f}s = {rate:.1f} tokens/s from {gen.get('url')}"
    if problems:
        detail += "; " + "; ".join(p for _, p in problems)
    first: str | None = problems[0][0] if problems else None
    figures = {
        "reason": first,
        "problems": tuple(p for _, p in problems),
        "tokens": tokens,
        "seconds": secs,
        "tokens_per_s": rate if secs > 0 else None,
        "sample": text[:SAMPLE_CHARS],
        "output": text,
    }
    return Check("generate", not problems, secs, detail, reason=first), figures


def judge_requests(gen: dict[str, Any], svc: ServiceConfig) -> tuple[Check, dict[str, Any]]:
    """The generate check over every judged completion (`requests` in turn, then `concurrency` at
    once): the first one's figures, the first failure's reason and problems, each one's row."""
    sequential = gen.get("sequential") or [gen]
    concurrent = gen.get("concurrent") or []
    runs = [(f"request {i + 1} of {svc.smoke.requests}", g) for i, g in enumerate(sequential)]
    runs += [(f"concurrent request {i + 1} of {len(concurrent)}", g) for i, g in enumerate(concurrent)]
    first_check, figures = judge(sequential[0], svc)
    rows: list[dict[str, Any]] = []
    failed = None
    for label, one in runs:
        check, f = (first_check, figures) if one is sequential[0] else judge(one, svc)
        rows.append(
            {
                "request": label,
                "ok": check.ok,
                "seconds": f.get("seconds"),
                "tokens": f.get("tokens"),
                "reason": f.get("reason"),
                "problems": list(f.get("problems", ())),
            }
        )
        if not check.ok and failed is None:
            failed = (label, f)
    figures = {**figures, "requests": rows}
    if failed is None:
        detail = first_check.detail
        if len(runs) > 1:
            detail += (
                f"; {len(sequential)} in turn and {len(concurrent)} at once all passed "
                f"(slowest {max(r['seconds'] or 0 for r in rows):.2f}s)"
            )
        return Check("generate", True, first_check.seconds, detail), figures
    label, f = failed
    problems = tuple(f"{label}: {p}" for p in f["problems"])
    figures.update(reason=f["reason"], problems=problems)
    passed = sum(r["ok"] for r in rows)
    detail = f"{'; '.join(problems)} ({passed} of {len(rows)} judged completion(s) passed)"
    return Check("generate", False, first_check.seconds, detail, reason=f["reason"]), figures


# ---- what /server_info says runs ------------------------------------------------------------------
def _norm(algorithm: Any) -> str | None:
    if algorithm is None or str(algorithm).strip().upper() in ("", "NONE", "NULL"):
        return None
    name = str(algorithm).strip().upper()
    return _ALIASES.get(name, name)


def same_algorithm(asked: str | None, reported: Any) -> bool:
    a, r = _norm(asked), _norm(reported)
    return a == r or (a, r) in _SAME


def algorithm_check(command: units.Command | str | None, info: dict[str, Any] | None) -> Check:
    """Is the speculative algorithm the server reports the one the unit's effective ExecStart asks for?"""
    why = _unasked(info, "speculative_algorithm")
    if why:
        return Check("algorithm", True, 0.0, f"not checked: {why}", skipped=True)
    assert info is not None
    reported = info["speculative_algorithm"]
    shown = reported or "no speculative decoding"
    if not isinstance(command, units.Command):
        return Check(
            "algorithm",
            True,
            0.0,
            f"not checked: the server runs {shown}, and what the unit asks for is "
            f"not known ({command or 'the target has no unit role'})",
            skipped=True,
        )
    asked = units.speculative_algorithm(command.argv)
    if same_algorithm(asked, reported):
        return Check(
            "algorithm",
            True,
            0.0,
            f"the server runs {shown}, as the unit asks"
            + (
                f" (--speculative-algorithm {asked}); names compared: the server's report, not the "
                "code path it runs"
                if asked
                else ""
            ),
        )
    return Check(
        "algorithm",
        False,
        0.0,
        f"the unit asks for {'--speculative-algorithm ' + asked if asked else 'no speculative decoding'}, "
        f"but the server runs {reported if reported else 'none'} (speculative_algorithm in {info['url']})",
        f"asked:    {asked}\nreported: {reported}\nthe unit: {command.text()}",
        reason="algorithm",
    )


def accept_check(
    command: units.Command | str | None,
    info: dict[str, Any] | None,
    minimum: float,
    floor: tuple[float, str] | None = None,
) -> Check | None:
    """With speculation on, the average accept length the server reports is at least `minimum`
    (1.0: no draft token was ever accepted), and at least `floor` (the floor an applied patch set
    declares to tell its algorithm from the linear one, and the patch set's name) where that is
    higher; None when there is nothing to judge."""
    declared = floor is not None and floor[0] > minimum
    if declared:
        assert floor is not None
        minimum, what = floor[0], f"the floor {floor[1]} declares ([verify] min_accept_length = {floor[0]:g})"
    else:
        what = f"min_accept_length = {minimum:g}"
    if minimum <= 0:
        return None
    reported = (info or {}).get("speculative_algorithm")
    asked = units.speculative_algorithm(command.argv) if isinstance(command, units.Command) else None
    if _norm(reported) is None and _norm(asked) is None:
        return None  # no speculation asked for or running
    why = _unasked(info, None)
    if why:
        return Check("accept", True, 0.0, f"not checked: {why}", skipped=True)
    assert info is not None
    lengths = info.get("accept_lengths") or []
    if not lengths:
        return Check(
            "accept",
            True,
            0.0,
            f"not checked: {info['url']} reports no avg_spec_accept_length (speculation has not run?)",
            skipped=True,
        )
    average = sum(lengths) / len(lengths)
    if average < minimum:
        none = (
            ": no draft token was ever accepted"
            if average <= 1.0
            else ": what the linear path gives, not its algorithm's"
            if declared
            else ""
        )
        return Check(
            "accept",
            False,
            0.0,
            f"average accept length {average:.2f} is below {what}{none} ({info['url']})",
            reason="accept-length",
        )
    return Check("accept", True, 0.0, f"average accept length {average:.2f}, at least {what}")


def _unasked(info: dict[str, Any] | None, key: str | None) -> str | None:
    """Why /server_info cannot answer (None when it can)."""
    if info is None:
        return "the probe did not ask /server_info"
    if info.get("error"):
        return f"{info.get('url')}: {info['error']}"
    if key is not None and key not in info:
        return f"{info.get('url')} does not say {key}"
    return None


# ---- greedy output, against the last pass -------------------------------------------------------
def output_check(now: str | None, then: dict[str, Any] | None, mode: str) -> Check | None:
    """Speculative decoding is lossless: at temperature 0 the output must be the last pass's for the
    same prompt, model and max_tokens (`then`: its entry, state and output). warn or fail."""
    if mode == "off" or now is None:
        return None
    if then is None:
        return Check(
            "output",
            True,
            0.0,
            "not checked: no earlier pass with this prompt, model and max_tokens "
            "(this output is kept for the next)",
            skipped=True,
        )
    where = f"the last pass (state {then['state']}, ledger entry {then['entry']})"
    if now == then["output"]:
        return Check("output", True, 0.0, f"the same greedy output as {where}")
    at = first_difference(then["output"], now)
    detail = f"greedy output differs from {where} at {at['where']}"
    shown = f"then: {at['then']}\nnow:  {at['now']}"
    if mode == "fail":
        return Check(
            "output", False, 0.0, detail + ' (compare_output = "fail")', shown, reason="output-changed"
        )
    return Check(
        "output", True, 0.0, detail + ' (compare_output = "warn": not a failure)', shown, warned=True
    )


def first_difference(a: str, b: str, before: int = 30, after: int = 50) -> dict[str, str]:
    """Where two texts first differ (character, line and column), and both texts around it."""
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    line = a.count("\n", 0, i) + 1
    column = i - (a.rfind("\n", 0, i) + 1) + 1
    start = max(0, i - before)

    def cut(text: str) -> str:
        piece = text[start : i + after]
        return (
            ("…" if start else "")
            + repr(piece)
            + ("…" if i + after < len(text) else "")
            + ("" if i < len(text) else " (ends here)")
        )

    return {"where": f"character {i + 1} (line {line}, column {column})", "then": cut(a), "now": cut(b)}
