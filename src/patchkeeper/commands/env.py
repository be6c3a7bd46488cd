"""`patchkeeper env` (a target's environment, one screen) and `patchkeeper diff --env`."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from ..change.session import Session
from ..checks import environment
from ..errors import Refused
from ..workspace import Workspace
from . import check_sides, emit_json


def env(ws: Workspace, target: str | None, as_json: bool) -> int:
    with Session(ws, target, "env", write=False) as s:
        s.warn_installation()
        fp = environment.take(s.target)
    if as_json:
        emit_json({"target": s.target.name, **fp})
    else:
        print("\n".join(environment.screen(s.target.name, fp)))
    return 0


def _recorded(s: Session, state: str) -> tuple[str, dict]:
    entry = environment.entry_of(s.ledger, state)
    if entry is None:
        raise Refused(f"state {state!r} of target {s.target.name} was recorded without an environment "
                      "fingerprint (before patchkeeper kept them)",
                      f"record one: patchkeeper snapshot -t {s.target.name} --name NAME")
    label = f"{s.target.name}:{entry.after.id}" + (f" ({entry.after.name})" if entry.after.name else "")
    return f"{label} as of {entry.kind} {entry.id}", environment.load(s.target, entry.env or "")


def _side(ws: Workspace, spec: str) -> tuple[str, dict]:
    """One side of a comparison: `TARGET` (its environment now) or `TARGET:STATE` (as recorded)."""
    name, _, state = spec.partition(":")
    with Session(ws, name or None, "diff --env", write=False) as s:
        s.warn_installation()
        if state:
            return _recorded(s, state)
        return f"{s.target.name} (now)", environment.take(s.target)


def _one(ws: Workspace, name: str, state: str | None) -> tuple[tuple[str, dict], tuple[str, dict]]:
    """A target's recorded state (default: its current one) and its environment now, one session."""
    with Session(ws, name or None, "diff --env", write=False) as s:
        s.warn_installation()
        if state is None:
            current = s.ledger.current()
            if current is None:
                raise Refused(f"target {s.target.name} has no recorded state to compare with",
                              f"compare two targets (patchkeeper diff --env {s.target.name} OTHER), "
                              "or record a state first")
            state = current.id
        return _recorded(s, state), (f"{s.target.name} (now)", environment.take(s.target))


def diff_env(ws: Workspace, names: tuple[str, ...], against: str | None, as_json: bool) -> int:
    """A target now against a recorded state (default: its current one), or two sides: targets
    (now, both talked to concurrently) or `TARGET:STATE`s."""
    check_sides("diff --env", names, against)
    if len(names) == 2:
        with ThreadPoolExecutor(max_workers=2) as pool:
            (la, a), (lb, b) = pool.map(lambda n: _side(ws, n), names)
    else:
        name, _, state = (names[0] if names else "").partition(":")
        (la, a), (lb, b) = _one(ws, name, state or against)
    changes = environment.compare(a, b)
    if as_json:
        emit_json({"a": la, "b": lb, "changes": [c.to_dict() for c in changes], "alike": not changes})
    else:
        print(f"environment of {lb} against {la}:")
        if not changes:
            print("  alike: interpreter, system, distributions, native libraries and GPU stack")
        for c in changes:
            print(f"  {c.area:12} {c.kind:10} {c.subject}  {c.detail}")
        if changes:
            print(f"{len(changes)} difference(s)")
    return 1 if changes else 0
