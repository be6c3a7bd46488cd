"""Verify a service by generation: restart it, wait until it answers, judge one real completion."""

from __future__ import annotations

import json
import re
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TextIO

from .host import probe_http
from .ledger import LedgerEntry, State, VerifyExtra, new_id, who
from .service import ServiceConfig
from .session import Session
from .targets import Target

SAMPLE_CHARS = 200
OUTPUT_KEEP = 8000  # characters of restart / log output kept in a report
WINDOW_MAX = 10.0  # seconds one probe run polls for readiness before progress is shown
_TOKEN = re.compile(r"\w+|[^\w\s]")


@dataclass(frozen=True)
class Check:
    """One step of a verification: restart, ready or generate."""

    name: str
    ok: bool
    seconds: float
    detail: str
    output: str = ""


@dataclass(frozen=True)
class Verification:
    """The outcome of one verification; `reason` names the first failure, None when it passed."""

    ok: bool
    reason: str | None  # restart | not-ready | probe | timeout | error | few-tokens | slow | degenerate
    message: str
    checks: tuple[Check, ...]
    tokens: int | None = None
    seconds: float | None = None
    tokens_per_s: float | None = None
    sample: str = ""
    problems: tuple[str, ...] = ()
    logs: str | None = None
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["checks"] = [asdict(c) for c in self.checks]
        d["problems"] = list(self.problems)
        return d


# ---- judging a generation ----------------------------------------------------------------------
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
        return f"only {len(set(tokens))} distinct tokens in {len(tokens)} ({len(set(tokens)) / len(tokens):.0%})"
    return None


def judge(gen: dict, svc: ServiceConfig) -> tuple[Check, dict]:
    """The generate check, and the figures (tokens, seconds, tokens_per_s, sample, problems, reason)."""
    smoke = svc.smoke
    secs = float(gen.get("seconds") or 0.0)
    if gen.get("error"):
        reason = "timeout" if gen.get("timed_out") else "error"
        what = f"{gen.get('url')}: {gen['error']}"
        if reason == "timeout":
            what = f"no completion from {gen.get('url')} within {smoke.timeout:g}s"
        return Check("generate", False, secs, what), {"reason": reason, "problems": (what,), "seconds": secs}
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
    figures = {"reason": problems[0][0] if problems else None, "problems": tuple(p for _, p in problems),
               "tokens": tokens, "seconds": secs, "tokens_per_s": rate if secs > 0 else None,
               "sample": text[:SAMPLE_CHARS]}
    return Check("generate", not problems, secs, detail), figures


# ---- running the checks on a target ----------------------------------------------------------
def _shell(target: Target, command: str, timeout: float) -> tuple[int, str]:
    try:
        code, out, err = target.run(["sh", "-c", command], timeout=timeout)
    except OSError as exc:
        return 127, f"cannot run sh on the target: {exc}"
    text = (out + err).decode(errors="replace")
    return code, text[-OUTPUT_KEEP:]


def restart(target: Target, svc: ServiceConfig) -> Check:
    start = time.monotonic()
    code, text = _shell(target, svc.restart, svc.restart_timeout)
    secs = time.monotonic() - start
    if code == 124 and "timed out after" in text:
        return Check("restart", False, secs, f"`{svc.restart}` did not finish within {svc.restart_timeout:g}s", text)
    if code != 0:
        return Check("restart", False, secs, f"`{svc.restart}` failed with exit code {code}", text)
    return Check("restart", True, secs, "exit 0", text)


def probe(target: Target, svc: ServiceConfig, progress: TextIO | None = sys.stderr) -> tuple[Check, dict | None]:
    """Wait for the server (progress on `progress`), then one generation; both from the target's side."""
    source = Path(probe_http.__file__).read_text(encoding="utf-8")
    smoke = svc.smoke
    gen = {"prompt": smoke.prompt, "max_tokens": smoke.max_tokens, "timeout": smoke.timeout,
           "endpoint": smoke.endpoint, "model": smoke.model}
    start = time.monotonic()
    deadline = start + svc.ready_timeout
    window = 1.0
    while True:
        window = min(window, max(0.0, deadline - time.monotonic()))
        launched = time.monotonic()
        request = json.dumps({"base_url": svc.base_url, "window": window, "interval": 0.1, "generate": gen})
        try:
            code, out, err = target.run([target.config.python, "-I", "-c", source],
                                        timeout=window + 2 * smoke.timeout + 30, input=request.encode())
        except OSError as exc:
            code, out, err = 127, b"", str(exc).encode()
        if code != 0:
            tail = err.decode(errors="replace").strip().splitlines()[-1:] or [f"exit code {code}"]
            return Check("ready", False, time.monotonic() - start,
                         f"the HTTP probe could not run with {target.config.python} on the target: {tail[0]}",
                         err.decode(errors="replace")[-OUTPUT_KEEP:]), {"reason": "probe"}
        try:
            result = json.loads(out)
            ready = bool(result["ready"])
        except (ValueError, TypeError, KeyError):  # something else printed on stdout (a sitecustomize?)
            return Check("ready", False, time.monotonic() - start,
                         f"the HTTP probe's answer was not understood: {out[:200]!r}",
                         err.decode(errors="replace")[-OUTPUT_KEEP:]), {"reason": "probe"}
        waited = time.monotonic() - start
        if ready:  # the probe's own clock: `waited` includes the generation that followed
            waited = launched - start + float(result.get("seconds", 0.0))
            detail = f"{result['url']} answered after {waited:.2f}s"
            if result.get("models"):
                detail += f" (model {result['models'][0]})"
            return Check("ready", True, waited, detail), result.get("generate")
        if time.monotonic() >= deadline:
            return Check("ready", False, waited, f"{svc.base_url} did not answer within ready_timeout = "
                         f"{svc.ready_timeout:g}s (last: {result['detail']})"), {"reason": "not-ready"}
        if progress is not None:
            print(f"  waiting for {svc.base_url}: {waited:.0f}s of {svc.ready_timeout:g}s ({result['detail']})",
                  file=progress, flush=True)
        window = min(window * 2, WINDOW_MAX)


def run_checks(target: Target, svc: ServiceConfig, with_restart: bool = True,
               progress: TextIO | None = sys.stderr) -> Verification:
    """Restart (optionally), Ready, Generates; on failure the logs command's output is attached."""
    checks: list[Check] = []
    figures: dict = {}
    if with_restart:
        checks.append(restart(target, svc))
    if not checks or checks[0].ok:
        ready, gen = probe(target, svc, progress)
        checks.append(ready)
        if ready.ok:
            if gen is None:
                gen = {"error": "the probe returned no generation", "url": svc.base_url}
            check, figures = judge(gen, svc)
            checks.append(check)
        else:
            figures = {"reason": gen["reason"], "problems": (ready.detail,)}
    else:
        figures = {"reason": "restart", "problems": (checks[0].detail,)}
    ok = all(c.ok for c in checks)
    logs = None
    if not ok and svc.logs:
        code, text = _shell(target, svc.logs, svc.logs_timeout)
        logs = text if code == 0 else f"(`{svc.logs}` exited {code})\n{text}"
    message = "passed" if ok else f"{figures['reason']}: {figures['problems'][0]}"
    return Verification(ok=ok, reason=None if ok else figures["reason"], message=message, checks=tuple(checks),
                  tokens=figures.get("tokens"), seconds=figures.get("seconds"),
                  tokens_per_s=figures.get("tokens_per_s"), sample=figures.get("sample", ""),
                  problems=tuple(figures.get("problems", ())), logs=logs)


def record_verification(s: Session, report: Verification, phase: str, of: str | None) -> LedgerEntry | None:
    """Append a `verify` ledger entry for the current state (none before any state is recorded)."""
    from . import environment

    state: State | None = s.ledger.current()
    if state is None:
        return None
    entry = LedgerEntry(id=new_id(), seq=s.ledger.next_seq(), time=time.time(), who=who(), command=s.command,
                        kind="verify", before=state, after=state,
                        extra=VerifyExtra(phase=phase, of=of, verify=report.to_dict()))
    if report.ok:  # what a later failure of this state is compared with
        entry = environment.record(entry, s.target)
    s.ledger.append(entry)
    return entry
