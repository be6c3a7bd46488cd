"""Verify a service by generation: restart it, wait until it answers, judge one real completion."""

from __future__ import annotations

import json
import re
import shlex
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TextIO, cast

from ..checks import units
from ..checks.service import ServiceConfig
from ..host import probe_http
from ..records.ledger import Ledger, LedgerEntry, State, VerifyExtra, new_id, who
from ..targets import Target
from .session import Session

SAMPLE_CHARS = 200
OUTPUT_KEEP = 8000  # characters of restart / log output kept in a report
WINDOW_MAX = 10.0  # seconds one probe run polls for readiness before progress is shown
MIN_SLOWER = 1.0  # seconds a regression must add too, so a server answering in milliseconds is not judged by jitter
MIN_SLOWER_READY = 30.0  # the same for the ready time, which a cold page cache alone can stretch by tens of seconds
FIRST_ERRORS = 8  # error-looking log lines quoted before the tail
_TOKEN = re.compile(r"\w+|[^\w\s]")
_ERROR_LINE = re.compile(r"Traceback \(most recent call last\)|\w*Error:|\bERROR\b|\bOSError\b|CUDA error|"
                         r"CUDA out of memory|cudaError|CUDA_ERROR|Not enough memory", re.IGNORECASE)


@dataclass(frozen=True)
class Check:
    """One step of a verification: restart, ready or generate."""

    name: str
    ok: bool
    seconds: float
    detail: str
    output: str = ""
    skipped: bool = False  # the check could not be made (said why in detail); it neither passed nor failed


@dataclass(frozen=True)
class Verification:
    """The outcome of one verification; `reason` names the first failure, None when it passed."""

    ok: bool
    reason: str | None  # restart | not-ready | probe | stale-server | timeout | error | few-tokens | slow |
    #                     degenerate | regression
    message: str
    checks: tuple[Check, ...]
    tokens: int | None = None
    seconds: float | None = None
    tokens_per_s: float | None = None
    sample: str = ""
    problems: tuple[str, ...] = ()
    logs: str | None = None
    extra: dict = field(default_factory=dict)
    errors: tuple[str, ...] = ()  # the first error-looking lines of the logs, wherever they are

    def to_dict(self) -> dict:
        d = asdict(self)
        d["checks"] = [asdict(c) for c in self.checks]
        d["problems"] = list(self.problems)
        d["errors"] = list(self.errors)
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
def _shell(target: Target, command: str, timeout: float, since: str = "", keep: int | None = OUTPUT_KEEP,
           stamp: bool = False) -> tuple[int, str]:
    """`sh -c command` on the target with $PATCHKEEPER_SINCE set; with `stamp`, the target's clock
    (epoch seconds) is printed on the first line of the output before the command runs."""
    script = ('PATCHKEEPER_SINCE=$1; export PATCHKEEPER_SINCE; ' + ('date +%s; ' if stamp else '')
              + 'exec sh -c "$2"')
    try:
        code, out, err = target.run(["sh", "-c", script, "sh", since, command], timeout=timeout)
    except OSError as exc:
        return 127, f"cannot run sh on the target: {exc}"
    text = (out + err).decode(errors="replace")
    return code, text if keep is None else text[-keep:]


def restart(target: Target, svc: ServiceConfig) -> tuple[Check, str]:
    """The restart check, and the target's clock just before it (epoch seconds, "" when unknown)."""
    start = time.monotonic()
    code, text = _shell(target, svc.restart, svc.restart_timeout, stamp=True)
    first, _, rest = text.partition("\n")
    since = first.strip() if first.strip().isdigit() else ""
    text = rest if since else text
    secs = time.monotonic() - start
    if code == 124 and "timed out after" in text:
        return Check("restart", False, secs, f"`{svc.restart}` did not finish within {svc.restart_timeout:g}s",
                     text), since
    if code != 0:
        return Check("restart", False, secs, f"`{svc.restart}` failed with exit code {code}", text), since
    return Check("restart", True, secs, "exit 0", text), since


def probe(target: Target, svc: ServiceConfig, progress: TextIO | None = sys.stderr,
          listener_port: int | None = None) -> tuple[Check, dict | None]:
    """Wait for the server (progress on `progress`), then one generation (after `warmup` others), and
    with `listener_port` the processes listening there (result["listener"]); all from the target's side."""
    source = Path(probe_http.__file__).read_text(encoding="utf-8")
    smoke = svc.smoke
    gen = {"prompt": smoke.prompt, "max_tokens": smoke.max_tokens, "timeout": smoke.timeout,
           "endpoint": smoke.endpoint, "model": smoke.model, "warmup": smoke.warmup}
    start = time.monotonic()
    deadline = start + svc.ready_timeout
    window = 1.0
    while True:
        window = min(window, max(0.0, deadline - time.monotonic()))
        launched = time.monotonic()
        request = json.dumps({"base_url": svc.base_url, "window": window, "interval": 0.1, "generate": gen,
                              "listener_port": listener_port})
        try:
            code, out, err = target.run([target.config.python, "-I", "-c", source],
                                        timeout=window + (2 + smoke.warmup) * smoke.timeout + 30,
                                        input=request.encode())
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
            gen_result = result.get("generate")
            if gen_result is not None and "listener" in result:
                gen_result = {**gen_result, "listener": result["listener"]}
            return Check("ready", True, waited, detail), gen_result
        if time.monotonic() >= deadline:
            return Check("ready", False, waited, f"{svc.base_url} did not answer within ready_timeout = "
                         f"{svc.ready_timeout:g}s (last: {result['detail']})"), {"reason": "not-ready"}
        if progress is not None:
            print(f"  waiting for {svc.base_url}: {waited:.0f}s of {svc.ready_timeout:g}s ({result['detail']})",
                  file=progress, flush=True)
        window = min(window * 2, WINDOW_MAX)


def run_checks(target: Target, svc: ServiceConfig, with_restart: bool = True,
               progress: TextIO | None = sys.stderr, last_pass: dict | None = None) -> Verification:
    """Restart (optionally), Ready, Server (the process on the port runs the unit's ExecStart),
    Generates, and no regression against `last_pass` (the figures of the last passing verification
    of this code state); on failure the logs command's output is attached, its first errors quoted."""
    checks: list[Check] = []
    figures: dict = {}
    since = ""
    if with_restart:
        check, since = restart(target, svc)
        checks.append(check)
    command = _unit_command(target) if svc.match_unit else None
    if not checks or checks[0].ok:
        ready, gen = probe(target, svc, progress, listener_port=_port(svc.base_url) if command else None)
        checks.append(ready)
        if ready.ok:
            if gen is None:
                gen = {"error": "the probe returned no generation", "url": svc.base_url}
            if command is not None:
                checks.append(server_check(command, gen.pop("listener", None)))
            check, figures = judge(gen, svc)
            checks.append(check)
            figures["warmups"] = gen.get("warmups", [])
            if all(c.ok for c in checks) and last_pass:
                slower = regression(last_pass, figures, ready.seconds if with_restart else None, svc)
                if slower:
                    figures.update(reason="regression", problems=tuple(slower))
                    checks.append(Check("history", False, 0.0, "; ".join(slower)))
                else:
                    checks.append(Check("history", True, 0.0, f"within max_slowdown = {svc.smoke.max_slowdown:g} "
                                        f"of the last pass of this state ({_figures_text(last_pass)})"))
            failed = next((c for c in checks if not c.ok), None)
            if failed is not None and failed.name == "server":
                figures.update(reason="stale-server", problems=(failed.detail,) + tuple(figures.get("problems", ())))
        else:
            figures = {"reason": gen["reason"] if gen else "not-ready", "problems": (ready.detail,)}
    else:
        figures = {"reason": "restart", "problems": (checks[0].detail,)}
    ok = all(c.ok for c in checks)
    logs, errors = None, cast("tuple[str, ...]", ())
    if not ok and svc.logs:
        code, text = _shell(target, svc.logs, svc.logs_timeout, since=since, keep=None)
        errors = first_errors(text)
        text = text[-OUTPUT_KEEP:]
        logs = text if code == 0 else f"(`{svc.logs}` exited {code})\n{text}"
    message = "passed" if ok else f"{figures['reason']}: {figures['problems'][0]}"
    extra = {"since": since} if since else {}
    if figures.get("warmups"):
        extra["warmups"] = figures["warmups"]
    return Verification(ok=ok, reason=None if ok else figures["reason"], message=message, checks=tuple(checks),
                  tokens=figures.get("tokens"), seconds=figures.get("seconds"),
                  tokens_per_s=figures.get("tokens_per_s"), sample=figures.get("sample", ""),
                  problems=tuple(figures.get("problems", ())), logs=logs, extra=extra, errors=errors)


# ---- the server on the port is the one the unit starts ------------------------------------------
def _port(base_url: str) -> int:
    return probe_http.split_url(base_url)[2]


def _unit_command(target: Target) -> units.Command | str | None:
    """What the unit role file's last ExecStart= runs; a string saying why not; None without a unit role."""
    path = target.config.files.get("unit")
    if path is None:
        return None
    try:
        text = target.agent.read(path).decode("utf-8", "replace")
    except Exception as exc:  # noqa: BLE001 - any failure to read is reported, and verification goes on
        return f"the unit file {path} could not be read ({exc})"
    command = units.exec_start(text)
    if command is None:
        return f"the unit file {path} has no ExecStart="
    return command


def server_check(command: units.Command | str, listener: dict | None) -> Check:
    """Does a process listening on the port run the unit's command line? Unknowable is said, not failed."""
    if isinstance(command, str):
        return Check("server", True, 0.0, f"not checked: {command}", skipped=True)
    if command.problem:
        return Check("server", True, 0.0, f"not checked: the unit's command line depends on more than the unit "
                     f"({command.problem})", skipped=True)
    if not listener or "processes" not in listener:
        why = (listener or {}).get("error", "the probe did not look")
        return Check("server", True, 0.0, f"not checked: {why}", skipped=True)
    procs = listener["processes"]
    want = list(command.argv)
    for proc in procs:
        if proc["argv"] == want:
            return Check("server", True, 0.0, f"pid {proc['pid']} runs the unit's ExecStart")
    readable = [p for p in procs if p["argv"] is not None]
    if not readable:
        return Check("server", True, 0.0, f"not checked: the command line of pid {procs[0]['pid']} could not be read",
                     skipped=True)
    shown = readable[0]
    return Check("server", False, 0.0,
                 f"the process on the port, pid {shown['pid']}, is not running the applied unit's ExecStart "
                 "(an old server still on the port, a daemon-reload that did not happen, a second unit?)",
                 f"running:  {shlex.join(shown['argv'])}\nthe unit: {shlex.join(want)}")


# ---- history: the last pass of the same code state ---------------------------------------------
def last_pass(ledger: Ledger, state: State | None) -> dict | None:
    """The figures of the newest passing verification of `state` (ready seconds, smoke seconds, tokens/s)."""
    if state is None:
        return None
    for e in ledger.entries().newest(state.id, "verify"):
        report = cast(VerifyExtra, e.extra).get("verify")
        if report and report.get("ok") and report.get("seconds") is not None:
            names = {c["name"]: c for c in report.get("checks", ())}
            ready = names["ready"]["seconds"] if "restart" in names and "ready" in names else None
            return {"entry": e.id, "time": e.time, "seconds": report["seconds"], "tokens": report.get("tokens"),
                    "tokens_per_s": report.get("tokens_per_s"), "ready": ready}
    return None


def _figures_text(f: dict) -> str:
    rate = f" ({f['tokens_per_s']:.1f} tokens/s)" if f.get("tokens_per_s") else ""
    ready = f", ready after {f['ready']:.2f} s" if f.get("ready") is not None else ""
    return f"smoke request {f['seconds']:.2f} s{rate}{ready}"


def regression(then: dict, now: dict, ready_now: float | None, svc: ServiceConfig) -> list[str]:
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
        out.append(f"{what}: {_secs(old)} then, {_secs(new)} now ({new / old:.1f}x, over max_slowdown = "
                   f"{limit:g}{rates}) for the same code state, last passed in {then['entry']}")
    return out


def _secs(s: float) -> str:
    return f"{s:.3g} s" if s < 100 else f"{s:.0f} s"


# ---- the logs ----------------------------------------------------------------------------------
def first_errors(text: str, limit: int = FIRST_ERRORS) -> tuple[str, ...]:
    """The first error-looking lines (Traceback, Error:, ERROR, OSError, CUDA errors, "Not enough
    memory"), each with its line number in the output, wherever they are."""
    rows = text.splitlines()
    hits = [f"line {i + 1} of {len(rows)}: {row.rstrip()}" for i, row in enumerate(rows) if _ERROR_LINE.search(row)]
    return tuple(hits[:limit])


def record_verification(s: Session, report: Verification, phase: str, of: str | None) -> LedgerEntry | None:
    """Append a `verify` ledger entry for the current state (none before any state is recorded)."""
    from ..checks import environment

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
