"""`patchkeeper diff`: a target against its recorded state, or two targets side by side."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from ..change import stacks
from ..change.session import Session
from ..checks import env_hosts, environment, installation, scan, units
from ..errors import PatchkeeperError, Refused
from ..patchset import diffwrite
from ..printable import one_line
from ..records.manifest import ROLE_PREFIX, Entry, differences
from ..targets import Target
from ..targets.fleet import Failed, each, failures, table
from ..workspace import Workspace
from . import check_sides, emit_json

_PATCH_LIMIT = 4 << 20  # larger files are reported, not diffed


@dataclass(frozen=True)
class Difference:
    """One file that differs between the two sides of a diff, with the patch sets that own it."""

    key: str
    kind: str  # changed | added | removed | mode (added: only on the second side)
    a: Entry | None
    b: Entry | None
    owners: tuple[tuple[str, str], ...]  # (side, patch set that owns the file there)

    def to_dict(self) -> dict[str, Any]:
        row: Callable[[Entry | None], list[Any] | None] = lambda e: [e.digest, e.size, e.mode] if e else None  # noqa: E731
        return {
            "key": self.key,
            "kind": self.kind,
            "a": row(self.a),
            "b": row(self.b),
            "owners": dict(self.owners),
        }


def diff(ws: Workspace, names: tuple[str, ...], against: str | None, patch: bool, as_json: bool) -> int:
    check_sides("diff", names, against)
    if len(names) == 2:
        return _two(ws, names[0], names[1], patch, as_json)
    return _one(ws, names[0] if names else None, against, patch, as_json)


def _one_result(ws: Workspace, name: str) -> dict[str, Any]:
    with Session(ws, name, "diff", write=False) as s:
        current = s.ledger.current()
        if current is None:
            return {"state": None, "differences": []}
        owners = stacks.owners_of(ws, current.stack)
        diffs = _classify(scan.compare(s.target, current.manifest)[0], {s.target.name: owners})
        told = installation.told(s.target, s.ledger, s.installation())
        return {
            "state": current.to_dict(),
            "differences": [d.to_dict() for d in diffs],
            "installation": told.to_dict() if told else None,
        }


def diff_all(ws: Workspace, as_json: bool) -> int:
    """Every target against its own recorded state, at once; one row each."""

    results = each(ws, _one_result, "diff")
    errors = [n for n, r in results.items() if isinstance(r, Failed)]
    differing = [
        n
        for n, r in results.items()
        if not isinstance(r, Failed) and (r["differences"] or (r.get("installation") or {}).get("trouble"))
    ]
    if as_json:
        emit_json({n: (r.to_dict() if isinstance(r, Failed) else r) for n, r in results.items()})
    else:
        rows = []
        for n, r in results.items():
            if isinstance(r, Failed):
                rows.append([n, "-", f"error: {r}"])
            elif r["state"] is None:
                rows.append([n, "-", "no recorded state"])
            else:
                kinds = [d["kind"] for d in r["differences"]]
                told = r.get("installation")
                rows.append(
                    [
                        n,
                        r["state"]["id"],
                        (", ".join(f"{kinds.count(k)} {k}" for k in dict.fromkeys(kinds)) or "files match")
                        + (f"; {told['what']}" if told else ""),
                    ]
                )
        table(["target", "state", "differences"], rows)
        print(f"{len(results)} target(s): {len(differing)} differ, {failures(results.values())}")
    return 2 if errors else 1 if differing else 0


def _classify(
    pairs: dict[str, tuple[Entry | None, Entry | None]], owners: dict[str, dict[str, str]]
) -> list[Difference]:
    kinds = differences(
        {k: a for k, (a, _) in pairs.items() if a}, {k: b for k, (_, b) in pairs.items() if b}
    )
    return [
        Difference(k, kind, *pairs[k], tuple((side, o[k]) for side, o in owners.items() if k in o))
        for k, kind in kinds.items()
    ]


def _one(ws: Workspace, name: str | None, against: str | None, patch: bool, as_json: bool) -> int:
    with Session(ws, name, "diff", write=False) as s:
        current = s.ledger.current()
        if current is None:
            raise Refused(
                f"target {s.target.name} has no recorded state to compare with",
                f"record one with `patchkeeper snapshot -t {s.target.name} --name NAME`, "
                "or compare two targets: patchkeeper diff HOST1 HOST2",
            )
        state = s.ledger.find_state(against) if against else current
        owners = stacks.owners_of(
            ws, list(current.stack) + [p for p in state.stack if p not in current.stack]
        )
        diffs = _classify(scan.compare(s.target, state.manifest)[0], {s.target.name: owners})
        patches = {}
        if patch:
            store, info = s.target.info.store, s.target.info
            old = lambda d: s.target.agent.store_get(store, d.a.digest) if d.a else b""  # noqa: E731
            new = lambda d: s.target.agent.read(info.path_of(d.key)) if d.b else b""  # noqa: E731
            patches = _patches(diffs, old, new, f"{state.id}", s.target.name)
        label = f"state {state.id}" + (f" ({state.name})" if state.name else "")
        starts = _exec_starts_recorded(s, diffs)
        told = installation.told(s.target, s.ledger, s.installation())
        code = 1 if diffs or (told is not None and told.trouble) else 0
        if as_json:
            emit_json(
                {
                    "target": s.target.name,
                    "against": state.to_dict(),
                    "algorithm": s.target.algorithm,
                    "differences": [d.to_dict() for d in diffs],
                    "patches": patches,
                    "exec_start": {k: _as_dict(v) for k, v in starts.items()},
                    "installation": told.to_dict() if told else None,
                }
            )
            return code
        print(f"{s.target.name} against {label}: {state.stack_text()}")
        if told is not None:
            print(("" if told.trouble else "note: ") + told.line)
        _print(
            diffs,
            patches,
            f"{len(diffs)} file(s) differ from {label}",
            f"{s.target.name}: files match {label}",
        )
        _print_starts({f"in {label}": starts.get("recorded"), "now": starts.get("now")})
        return code


def _two(ws: Workspace, a: str, b: str, patch: bool, as_json: bool) -> int:
    with ExitStack() as stack, ThreadPoolExecutor(max_workers=2) as pool:
        sessions = [Session(ws, n, f"diff {a} {b}", write=False) for n in (a, b)]
        opening = [pool.submit(s.__enter__) for s in sessions]  # connect to both hosts concurrently
        for future in opening:
            if future.exception() is None:
                stack.push(future.result().__exit__)
        for future in opening:
            future.result()  # the first failure, once every opened session will be closed
        for s in sessions:
            s.warn_installation()
        algorithms = {s.target.algorithm for s in sessions}
        common = next(iter(algorithms)) if len(algorithms) == 1 else "sha256"  # every Python has sha256
        ma, mb = pool.map(lambda s: scan.scan_all(s.target, common), sessions)
        owners = {}
        for s in sessions:
            current = s.ledger.current()
            owners[s.target.name] = stacks.owners_of(ws, current.stack) if current else {}
        diffs = _classify({k: (ma.get(k), mb.get(k)) for k in set(ma) | set(mb)}, owners)
        patches = {}
        if patch:
            ta, tb = (s.target for s in sessions)
            read: Callable[[Target, str], bytes] = lambda t, key: t.agent.read(t.info.path_of(key))  # noqa: E731
            wanted = [
                d
                for d in diffs
                if d.kind != "mode" and max(d.a.size if d.a else 0, d.b.size if d.b else 0) <= _PATCH_LIMIT
            ]
            got_a = dict(
                zip(
                    [d.key for d in wanted if d.a],
                    pool.map(lambda d: read(ta, d.key), [d for d in wanted if d.a]),
                )
            )
            got_b = dict(
                zip(
                    [d.key for d in wanted if d.b],
                    pool.map(lambda d: read(tb, d.key), [d for d in wanted if d.b]),
                )
            )
            patches = _patches(diffs, lambda d: got_a.get(d.key, b""), lambda d: got_b.get(d.key, b""), a, b)
        starts = {}
        if any(d.key.startswith(ROLE_PREFIX) for d in diffs):
            starts = dict(zip((a, b), pool.map(lambda s: units.on_target(s.target), sessions)))
        fa, fb = pool.map(lambda s: environment.take(s.target), sessions)
        env_changes = env_hosts.compare_hosts(fa, fb, *(s.target.name for s in sessions))
        if as_json:
            emit_json(
                {
                    "a": a,
                    "b": b,
                    "algorithm": common,
                    "differences": [d.to_dict() for d in diffs],
                    "patches": patches,
                    "states": {s.target.name: _state_dict(s) for s in sessions},
                    "exec_start": {k: _as_dict(v) for k, v in starts.items()},
                    "environment": {"alike": not env_changes, "differences": len(env_changes)},
                }
            )
            return 1 if diffs else 0
        for s in sessions:
            current = s.ledger.current()
            print(
                f"{s.target.name}: {current.stack_text() if current else '(no recorded state)'}"
                f"{f', state {current.id}' if current else ''}"
            )
        _print(
            diffs,
            patches,
            f"{len(diffs)} file(s) differ between {a} and {b} "
            f"(added: only on {b}; removed: only on {a}; compared by {common})",
            f"{a} and {b} have the same files ({len(ma)} compared by {common})",
        )
        _print_starts({f"on {n}": c for n, c in starts.items()})
        if env_changes:
            areas = ", ".join(dict.fromkeys(c.area for c in env_changes))
            print(
                f"the environments differ too: {len(env_changes)} difference(s) ({areas}); "
                f"`patchkeeper diff --env {a} {b}` lists them"
            )
        return 1 if diffs else 0


def _exec_starts_recorded(s: Session, diffs: list[Difference]) -> dict[str, Any]:
    """Where role files differ from the recorded state: the unit's effective ExecStart as recorded
    (the recorded bytes of the differing role files in place of today's) and now."""
    roles = [d for d in diffs if d.key.startswith(ROLE_PREFIX)]
    if not roles or "unit" not in s.target.config.files:
        return {}

    override: dict[str, bytes | None] = {}
    for d in roles:
        try:
            override[s.target.info.path_of(d.key)] = (
                s.target.agent.store_get(s.target.info.store, d.a.digest) if d.a else None
            )
        except (PatchkeeperError, OSError, KeyError):  # its bytes were not kept, or the role is gone
            return {"now": units.on_target(s.target)}
    return {"recorded": units.on_target(s.target, override), "now": units.on_target(s.target)}


def _as_dict(command: units.Command | str | None) -> dict[str, Any] | None:
    return units.as_dict(command)


def _print_starts(starts: dict[str, Any]) -> None:
    """The unit's effective ExecStart on each side, where a role file differs."""

    for side, command in starts.items():
        if command is None:
            continue
        lines = units.describe(command)
        print(
            f"the unit's {lines[0]} ({side})" if lines[0].startswith("ExecStart") else f"{lines[0]} ({side})"
        )
        for line in lines[1:]:
            print(line)


def _state_dict(s: Session) -> dict[str, Any] | None:
    current = s.ledger.current()
    return current.to_dict() if current else None


def _patches(
    diffs: list[Difference],
    old: Callable[[Difference], bytes],
    new: Callable[[Difference], bytes],
    label_a: str,
    label_b: str,
) -> dict[str, str]:
    """Unified diffs of the differing text files; binary or oversized files get a one-line note."""

    out = {}
    for d in diffs:
        if d.kind == "mode":
            continue
        if max(d.a.size if d.a else 0, d.b.size if d.b else 0) > _PATCH_LIMIT:
            out[d.key] = f"(file over {_PATCH_LIMIT >> 20} MiB: not diffed)\n"
            continue
        try:
            before, after = old(d), new(d)
        except (PatchkeeperError, OSError) as exc:  # e.g. a state recorded without its bytes
            out[d.key] = f"(bytes not available: {exc})\n"
            continue
        try:
            if b"\0" in before or b"\0" in after:
                raise UnicodeDecodeError("utf-8", b"", 0, 1, "NUL byte")
            before.decode("utf-8"), after.decode("utf-8")
        except UnicodeDecodeError:
            out[d.key] = "Binary files differ\n"
            continue
        body = diffwrite.hunks(before, after)
        out[d.key] = (
            (
                f"--- {label_a + '/' + d.key if d.a else '/dev/null'}\n"
                f"+++ {label_b + '/' + d.key if d.b else '/dev/null'}\n{body}"
            )
            if body
            else ""
        )
    return out


def _print(diffs: list[Difference], patches: dict[str, str], headline: str, same: str) -> None:
    if not diffs:
        print(same)
        return
    print(headline + ":")
    for d in diffs:
        owner = "; ".join(f"{o} on {side}" if len(d.owners) > 1 else o for side, o in d.owners)
        print(f"  {d.kind:8} {one_line(d.key)}" + (f"  [{one_line(owner)}]" if owner else ""))
    for _key, text in patches.items():
        print(text, end="")
