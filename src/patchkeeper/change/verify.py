"""Verify a service by generation: restart it, wait until it answers, judge real completions and what
the server says runs; `run_checks` returns the result as a value (one call per host)."""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO, cast

from ..checks import environment, manager, units
from ..errors import PatchkeeperError
from ..host import probe_http
from ..patchset import patchset
from ..records.ledger import Ledger, LedgerEntry, State, VerifyExtra
from ..targets import Target
from . import running, smoke, verify_history
from .plans import new_entry
from .service import ServiceConfig
from .session import Session
from .smoke import SAMPLE_CHARS, Check, count_tokens, degenerate, judge  # noqa: F401  (their home is smoke.py)

OUTPUT_KEEP = 8000  # characters of restart / log output kept in a report
WINDOW_MAX = 10.0  # seconds one probe run polls for readiness before progress is shown
FIRST_ERRORS = 8  # error-looking log lines quoted before the tail
_ERROR_LINE = re.compile(
    r"Traceback \(most recent call last\)|\w*Error:|\bERROR\b|\bOSError\b|CUDA error|"
    r"CUDA out of memory|cudaError|CUDA_ERROR|Not enough memory",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Verification:
    """The outcome of one verification; `reason` names the first failure, None when it passed."""

    ok: bool
    reason: str | None  # restart | not-ready | probe | stale-server | timeout | error | few-tokens | slow |
    #                     degenerate | algorithm | accept-length | output-changed | regression |
    #                     not-effective (the manager: the change did not take effect)
    message: str
    checks: tuple[Check, ...]
    tokens: int | None = None
    seconds: float | None = None
    tokens_per_s: float | None = None
    sample: str = ""
    problems: tuple[str, ...] = ()
    logs: str | None = None
    extra: dict[str, Any] = field(
        default_factory=dict
    )  # since, warmups, requests (each judged completion), server_info
    errors: tuple[str, ...] = ()  # the first error-looking lines of the logs, wherever they are
    output: str | None = None  # the first judged completion's text (greedy: compared with the next pass's)
    smoke: dict[str, Any] = field(
        default_factory=dict
    )  # what makes two outputs comparable: prompt, model, max_tokens, endpoint

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["checks"] = [asdict(c) for c in self.checks]
        d["problems"] = list(self.problems)
        d["errors"] = list(self.errors)
        return d


# ---- running the checks on a target ----------------------------------------------------------
def _shell(
    target: Target,
    command: str,
    timeout: float,
    since: str = "",
    keep: int | None = OUTPUT_KEEP,
    stamp: bool = False,
) -> tuple[int, str, str]:
    """`sh -c command` on the target with $PATCHKEEPER_SINCE set: its exit code, stdout and stderr; with
    `stamp`, the target's clock (epoch seconds) is printed on stdout's first line before the command runs."""
    script = (
        "PATCHKEEPER_SINCE=$1; export PATCHKEEPER_SINCE; "
        + ("date +%s; " if stamp else "")
        + 'exec sh -c "$2"'
    )
    try:
        code, out, err = target.run(["sh", "-c", script, "sh", since, command], timeout=timeout)
    except OSError as exc:
        return 127, "", f"cannot run sh on the target: {exc}"
    texts = [b.decode(errors="replace") for b in (out, err)]
    return code, *(t if keep is None else t[-keep:] for t in texts)  # type: ignore[return-value]


def restart(target: Target, svc: ServiceConfig) -> tuple[Check, str]:
    """The restart check, and the target's clock just before it (epoch seconds, "" when unknown). The
    command's stderr is kept even when it succeeds: systemd says there what it wants done (a daemon-reload)."""
    start = time.monotonic()
    code, out, err = _shell(target, svc.restart, svc.restart_timeout, stamp=True)
    first, _, rest = out.partition("\n")
    since = first.strip() if first.strip().isdigit() else ""
    out = rest if since else out
    secs = time.monotonic() - start
    if code == 124 and "timed out after" in out + err:
        return Check(
            "restart",
            False,
            secs,
            f"`{svc.restart}` did not finish within {svc.restart_timeout:g}s",
            out + err,
            reason="restart",
        ), since
    if code != 0:
        return Check(
            "restart",
            False,
            secs,
            f"`{svc.restart}` failed with exit code {code}",
            out + err,
            reason="restart",
        ), since
    said = err.strip()
    detail = "exit 0" + (", with this on stderr:" if said else "")
    return Check("restart", True, secs, detail, err, warned=bool(said)), since


def probe(
    target: Target, svc: ServiceConfig, progress: TextIO | None = sys.stderr, listener_port: int | None = None
) -> tuple[Check, dict[str, Any] | None]:
    """Wait for the server (progress on `progress`), then the generations (after `warmup` others), then
    /server_info (result["server_info"]), and with `listener_port` the processes listening there
    (result["listener"]); all from the target's side."""
    source = Path(probe_http.__file__).read_text(encoding="utf-8")
    smoke_cfg = svc.smoke
    gen = {
        "prompt": smoke_cfg.prompt,
        "max_tokens": smoke_cfg.max_tokens,
        "timeout": smoke_cfg.timeout,
        "endpoint": smoke_cfg.endpoint,
        "model": smoke_cfg.model,
        "warmup": smoke_cfg.warmup,
        "requests": smoke_cfg.requests,
        "concurrency": smoke_cfg.concurrency,
    }
    start = time.monotonic()
    deadline = start + svc.ready_timeout
    window = 1.0
    rounds = smoke_cfg.warmup + smoke_cfg.requests + (1 if smoke_cfg.concurrency else 0)
    while True:
        window = min(window, max(0.0, deadline - time.monotonic()))
        launched = time.monotonic()
        request = json.dumps(
            {
                "base_url": svc.base_url,
                "window": window,
                "interval": 0.1,
                "generate": gen,
                "listener_port": listener_port,
            }
        )
        try:
            code, out, err = target.run_python(
                source, timeout=window + (2 + rounds) * smoke_cfg.timeout + 60, input=request.encode()
            )
        except OSError as exc:
            code, out, err = 127, b"", str(exc).encode()
        if code != 0:
            tail = err.decode(errors="replace").strip().splitlines()[-1:] or [f"exit code {code}"]
            detail = f"the HTTP probe could not run with {target.config.python} on the target: {tail[0]}"
            return _unprobed(start, detail, err), None
        try:
            result = json.loads(out)
            ready = bool(result["ready"])
        except (ValueError, TypeError, KeyError):  # something else printed on stdout (a sitecustomize?)
            return _unprobed(start, f"the HTTP probe's answer was not understood: {out[:200]!r}", err), None
        waited = time.monotonic() - start
        if ready:  # the probe's own clock: `waited` includes the generation that followed
            waited = launched - start + float(result.get("seconds", 0.0))
            detail = f"{result['url']} answered after {waited:.2f}s"
            if result.get("models"):
                detail += f" (model {result['models'][0]})"
            gen_result = result.get("generate")
            if gen_result is not None:
                gen_result = {**gen_result, "server_info": result.get("server_info")}
                if "listener" in result:
                    gen_result["listener"] = result["listener"]
            return Check("ready", True, waited, detail), gen_result
        if time.monotonic() >= deadline:
            return Check(
                "ready",
                False,
                waited,
                f"{svc.base_url} did not answer within ready_timeout = "
                f"{svc.ready_timeout:g}s (last: {result['detail']})",
                reason="not-ready",
            ), None
        if progress is not None:
            print(
                f"  waiting for {svc.base_url}: {waited:.0f}s of {svc.ready_timeout:g}s ({result['detail']})",
                file=progress,
                flush=True,
            )
        window = min(window * 2, WINDOW_MAX)


def _unprobed(start: float, detail: str, err: bytes) -> Check:
    """The ready check when the HTTP probe itself failed (reason `probe`), with the end of its stderr."""
    return Check(
        "ready",
        False,
        time.monotonic() - start,
        detail,
        err.decode(errors="replace")[-OUTPUT_KEEP:],
        reason="probe",
    )


def run_checks(
    target: Target,
    svc: ServiceConfig,
    with_restart: bool = True,
    progress: TextIO | None = sys.stderr,
    last_pass: dict[str, Any] | None = None,
    last_output: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None,
    floor: tuple[float, str] | None = None,
) -> Verification:
    """Restart (optionally), Ready, Server (the process on the port runs the unit's effective
    ExecStart), Generate (`requests` in turn, `concurrency` at once), Algorithm and Accept (what
    /server_info says runs), Output (the greedy output `last_output(key)` gives: the last comparable pass)
    and no regression against `last_pass` (the last pass of this code state); `floor`: the accept
    length an applied patch set declares for its algorithm (declared_floor). On failure the logs
    command's output is attached, its first errors quoted. Changes nothing; records nothing."""
    checks: list[Check] = []
    figures: dict[str, Any] = {}
    since = ""
    extra: dict[str, Any] = {}
    before = manager.ask(target) if with_restart else None  # the main pid before the restart
    if with_restart:
        check, since = restart(target, svc)
        checks.append(check)
    reading = units.on_target(target)
    command: units.Command | str | None = reading
    view: manager.ManagerView | str | None = None
    matched = command if svc.match_unit else None
    if not checks or checks[0].ok:
        ready, gen = probe(
            target, svc, progress, listener_port=running.port_of(svc.base_url) if matched else None
        )
        checks.append(ready)
        if ready.ok:
            if gen is None:
                gen = {"error": "the probe returned no generation", "url": svc.base_url}
            info = gen.pop("server_info", None)
            view = manager.ask(target) if reading is not None else None
            dropins = manager.role_dropins(target, reading) if isinstance(view, manager.ManagerView) else None
            effect = running.effect_check(view, since, before, reading, dropins)
            if effect is not None:  # the manager answered: what runs is what it says
                checks.append(effect)
                command = manager.as_command(cast(manager.ManagerView, view))
            if matched is not None and command is not None:
                unasked = view if isinstance(view, str) else None
                checks.append(running.server_check(command, gen.pop("listener", None), unasked))
            check, figures = smoke.judge_requests(gen, svc)
            checks.append(check)
            extra.update(requests=figures.get("requests", []), server_info=info)
            figures["warmups"] = gen.get("warmups", [])
            checks.append(smoke.algorithm_check(command, info))
            accept = smoke.accept_check(command, info, svc.smoke.min_accept_length, floor)
            if accept is not None:
                checks.append(accept)
            key = verify_history.smoke_key(svc, gen.get("model"))
            then = last_output(key) if last_output is not None and check.ok else None
            compared = smoke.output_check(
                figures.get("output") if check.ok else None, then, svc.smoke.compare_output
            )
            if compared is not None:
                checks.append(compared)
            if all(c.ok for c in checks) and last_pass:
                checks.append(
                    verify_history.history_check(
                        last_pass, figures, ready.seconds if with_restart else None, svc
                    )
                )
            if "output" in figures:
                figures["smoke"] = key
    ok = all(c.ok for c in checks)
    problems: list[str] = []
    for c in checks:
        if not c.ok:
            problems += list(figures.get("problems", ())) if c.name == "generate" else [c.detail]
    reason = next((c.reason or c.name for c in checks if not c.ok), None)
    logs, errors = None, cast("tuple[str, ...]", ())
    if not ok and svc.logs:
        code, out, err = _shell(target, svc.logs, svc.logs_timeout, since=since, keep=None)
        text = out + err
        errors = first_errors(text)
        text = text[-OUTPUT_KEEP:]
        logs = text if code == 0 else f"(`{svc.logs}` exited {code})\n{text}"
    if since:
        extra["since"] = since
    if figures.get("warmups"):
        extra["warmups"] = figures["warmups"]
    return Verification(
        ok=ok,
        reason=reason,
        message="passed" if ok else f"{reason}: {problems[0]}",
        checks=tuple(checks),
        tokens=figures.get("tokens"),
        seconds=figures.get("seconds"),
        tokens_per_s=figures.get("tokens_per_s"),
        sample=figures.get("sample", ""),
        problems=tuple(problems),
        logs=logs,
        extra={k: v for k, v in extra.items() if v is not None},
        errors=errors,
        output=figures.get("output"),
        smoke=figures.get("smoke", {}),
    )


def verify_target(
    target: Target,
    ledger: Ledger,
    svc: ServiceConfig,
    with_restart: bool = True,
    progress: TextIO | None = sys.stderr,
    patchsets_dir: Path | None = None,
) -> Verification:
    """The checks of one target against its own history (the last pass of its current state, the last
    comparable greedy output) and the accept-length floor its applied patch sets declare (read from
    `patchsets_dir`): a value the caller records (record_verification). One call per host."""
    current = ledger.current()
    return run_checks(
        target,
        svc,
        with_restart,
        progress,
        last_pass=verify_history.last_pass(ledger, current),
        last_output=None
        if svc.smoke.compare_output == "off"
        else lambda key: verify_history.last_output(ledger, key),
        floor=declared_floor(patchsets_dir, current) if patchsets_dir is not None else None,
    )


def declared_floor(patchsets_dir: Path, state: State | None) -> tuple[float, str] | None:
    """The highest accept-length floor (`[verify] min_accept_length`) an applied patch set of `state`
    declares, with its name@version: read from the workspace's copy of that version (a set no
    longer there, or at another version, declares nothing)."""
    found: tuple[float, str] | None = None
    for ref in state.stack if state is not None else ():
        try:
            ps = patchset.load(patchsets_dir, ref["name"])
        except PatchkeeperError:
            continue
        if (
            ps.version == ref["version"]
            and ps.min_accept_length is not None
            and (found is None or ps.min_accept_length > found[0])
        ):
            found = (ps.min_accept_length, ps.ident)
    return found


# ---- the logs ----------------------------------------------------------------------------------
def first_errors(text: str, limit: int = FIRST_ERRORS) -> tuple[str, ...]:
    """The first error-looking lines (Traceback, Error:, ERROR, OSError, CUDA errors, "Not enough
    memory"), each with its line number in the output, wherever they are."""
    rows = text.splitlines()
    hits = [
        f"line {i + 1} of {len(rows)}: {row.rstrip()}"
        for i, row in enumerate(rows)
        if _ERROR_LINE.search(row)
    ]
    return tuple(hits[:limit])


def record_verification(s: Session, report: Verification, phase: str, of: str | None) -> LedgerEntry | None:
    """Append a `verify` ledger entry for the current state (none before any state is recorded)."""

    state: State | None = s.ledger.current()
    if state is None:
        return None
    entry = new_entry(s, "verify", state, state, VerifyExtra(phase=phase, of=of, verify=report.to_dict()))
    if report.ok:  # what a later failure of this state is compared with
        entry = environment.record(entry, s.target)
    s.ledger.append(entry)
    return entry
