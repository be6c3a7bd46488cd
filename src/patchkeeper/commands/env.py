"""`patchkeeper env` (a target's environment, one screen) and `patchkeeper diff --env`."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..change.session import Session
from ..checks import env_hosts, env_screen, environment
from ..errors import Refused
from ..workspace import Workspace
from . import check_sides, emit_json


def env(ws: Workspace, target: str | None, as_json: bool) -> int:
    with Session(ws, target, "env", write=False) as s:
        s.warn_installation()
        fp = environment.take(s.target)
    if as_json:
        emit_json({"target": s.target.name, **fp, "import_context": env_screen.import_context(fp)})
    else:
        print("\n".join(env_screen.screen(s.target.name, fp)))
    return 0


def _recorded(s: Session, state: str) -> tuple[str, dict[str, Any]]:
    entry = environment.entry_of(s.ledger, state)
    if entry is None:
        raise Refused(
            f"state {state!r} of target {s.target.name} was recorded without an environment "
            "fingerprint (before patchkeeper kept them)",
            f"record one: patchkeeper snapshot -t {s.target.name} --name NAME",
        )
    label = f"{s.target.name}:{entry.after.id}" + (f" ({entry.after.name})" if entry.after.name else "")
    return f"{label} as of {entry.kind} {entry.id}", environment.load(s.target, entry.env or "")


def _last_pass(s: Session) -> tuple[str, dict[str, Any]]:
    """The fingerprint of the last passing verification of the current code state: a stable point
    (the state's newest entry may have been taken while the service was failing)."""
    current = s.ledger.current()
    last = environment.last_passing(s.ledger, current) if current is not None else None
    if current is None or last is None or last.env is None:
        what = (
            "has no recorded state"
            if current is None
            else f"has no passing verification of its current state {current.id} that kept a fingerprint"
        )
        raise Refused(
            f"target {s.target.name} {what}",
            f"verify it while it works (patchkeeper verify -t {s.target.name}), or compare with a "
            "state: --against STATE",
        )
    return f"{s.target.name}:{current.id} as of its last passing verification {last.id}", environment.load(
        s.target, last.env
    )


def _side(ws: Workspace, spec: str) -> tuple[str, dict[str, Any]]:
    """One side of a comparison: `TARGET` (its environment now) or `TARGET:STATE` (as recorded)."""
    name, _, state = spec.partition(":")
    with Session(ws, name or None, "diff --env", write=False) as s:
        s.warn_installation()
        if state:
            return _recorded(s, state)
        return f"{s.target.name} (now)", environment.take(s.target)


def _one(
    ws: Workspace, name: str, state: str | None, since_pass: bool = False
) -> tuple[tuple[str, dict[str, Any]], tuple[str, dict[str, Any]]]:
    """A target's recorded state (default: its current one; with `since_pass`, the last passing
    verification of its current one) and its environment now, one session."""
    with Session(ws, name or None, "diff --env", write=False) as s:
        s.warn_installation()
        if since_pass:
            return _last_pass(s), (f"{s.target.name} (now)", environment.take(s.target))
        if state is None:
            current = s.ledger.current()
            if current is None:
                raise Refused(
                    f"target {s.target.name} has no recorded state to compare with",
                    f"compare two targets (patchkeeper diff --env {s.target.name} OTHER), "
                    "or record a state first",
                )
            state = current.id
        return _recorded(s, state), (f"{s.target.name} (now)", environment.take(s.target))


def diff_env(
    ws: Workspace, names: tuple[str, ...], against: str | None, as_json: bool, since_pass: bool = False
) -> int:
    """A target now against a recorded state (default: its current one), or two sides: targets
    (now, both talked to concurrently) or `TARGET:STATE`s."""
    check_sides("diff --env", names, against)
    hosts = len(names) == 2 and not any(":" in n for n in names)  # two hosts now: neither side is "before"
    if len(names) == 2:
        with ThreadPoolExecutor(max_workers=2) as pool:
            (la, a), (lb, b) = pool.map(lambda n: _side(ws, n), names)
    else:
        name, _, state = (names[0] if names else "").partition(":")
        (la, a), (lb, b) = _one(ws, name, state or against, since_pass)
    if hosts:
        changes = env_hosts.compare_hosts(a, b, la.removesuffix(" (now)"), lb.removesuffix(" (now)"))
    else:
        changes = environment.compare(a, b)
    if as_json:
        emit_json({"a": la, "b": lb, "changes": [c.to_dict() for c in changes], "alike": not changes})
    else:
        print(
            f"environments of {la} and {lb}, each difference with both values:"
            if hosts
            else f"environment of {lb} against {la}:"
        )
        if not changes:
            print("  alike: interpreter, system, distributions, native libraries and GPU stack")
        for c in changes:
            print(f"  {c.area:12} {c.kind:10} {c.subject}  {c.detail}")
        if changes:
            print(f"{len(changes)} difference(s)")
    return 1 if changes else 0
