"""`patchkeeper status`: the applied stack, and whether the files still match the recorded state."""

from __future__ import annotations

import difflib
from typing import Any

from ..change import plans, stacks
from ..change.session import Session
from ..checks import audit, installation, manager, units
from ..errors import BadInput
from ..patchset import patchset
from ..printable import one_line
from ..records.ledger import State
from ..records.manifest import ROLE_PREFIX
from ..targets.fleet import Failed, each, failures, table
from ..workspace import Workspace
from . import emit_json


def status(ws: Workspace, target: str | None, as_json: bool) -> int:
    with Session(ws, target, "status", write=False) as s:
        s.say_left_over()
        info = s.target.info
        current = s.ledger.current()
        report = None
        if current is None:
            diffs: dict[str, str] = {}
        elif not as_json and audit.is_warm(s.target):  # cheap only when the audit's stat caches are warm
            report = audit.audit_target(s.target, s.ledger, owners=stacks.owners_of(ws, current.stack))
            diffs = report.differences  # its one pass over the package compared it with the recorded state
        else:
            diffs = plans.drift(s.target, current.manifest)  # compared on the target: only differences travel
        exec_start, view = None, None
        if "unit" in s.config.files:
            exec_start = units.on_target(s.target)
            view = manager.ask(s.target)
        owed = manager.debts(s.target, view, exec_start)
        told = installation.told(s.target, s.ledger, s.installation())
        stale = out_of_date(ws, s, current, diffs) if current is not None else []
        doc = {
            **_head(s, current),
            "differences": diffs,
            "unfinished": s.unfinished.message if s.unfinished else None,
            "roles": dict(info.roles),
            "exec_start": _as_dict(exec_start),
            "manager": manager.as_dict(view, exec_start, owed),
            "installation": told.to_dict() if told else None,
            "out_of_date": stale,
        }
        code = 1 if told is not None and told.trouble or owed else 0
        if as_json:
            emit_json(doc)
            return code
        print(f"target {s.target.name}: {info.package} {info.version} in {info.site}")
        if s.unfinished is not None:
            print(f"UNFINISHED: {s.unfinished.message}\n  hint: {s.unfinished.hint}")
        if current is None:
            print("no recorded state: patchkeeper has not changed this target yet")
            return 0
        label = _label(s, current)
        print(f"state {current.id}{' (' + one_line(label) + ')' if label else ''}: {current.stack_text()}")
        for p in current.stack:
            print(f"  {one_line(p['name'])}@{one_line(p['version'])}  {p['digest'][:19]}…")
        if told is not None:
            print(("" if told.trouble else "note: ") + told.line)
        _print_unit(s, exec_start)
        for line in manager.describe(view, exec_start, owed):
            print(line)
        for item in stale:
            _print_stale(item, _where(s))
        if report is not None:
            print("audit: " + report.summary())
        if not diffs:
            print(
                "files match the recorded state" + (f", but not what systemd runs: {owed[0]}" if owed else "")
            )
        else:
            print(f"{len(diffs)} file(s) differ from the recorded state (changed outside patchkeeper):")
            for key, kind in list(diffs.items())[:20]:
                print(f"  {kind:8} {one_line(key)}")
            if len(diffs) > 20:
                print(f"  … and {len(diffs) - 20} more")
        if told is not None and told.trouble:
            print(f"hint: {_hint(s, told)}")
        return code


def out_of_date(ws: Workspace, s: Session, current: State, diffs: dict[str, str]) -> list[dict[str, Any]]:
    """Role files (the drop-in) that match the recorded state but are no longer what the workspace renders
    for the target (a var changed since the apply): which, the vars that changed, what `apply` would write."""
    out: list[dict[str, Any]] = []
    for ref in current.stack:
        try:
            ps = patchset.load(ws.patchsets_dir, ref["name"])
        except BadInput:
            continue
        if ps.digest != ref["digest"] or not ps.files:
            continue  # another version in the workspace: status says so elsewhere (`diff`)
        try:
            bound = ps.bind(s.config)
        except BadInput as exc:
            out.append(
                {
                    "patchset": ps.ident,
                    "name": ps.name,
                    "role": None,
                    "path": None,
                    "vars": {},
                    "why": exc.message,
                    "would_write": None,
                    "diff": [],
                }
            )
            continue
        was, now = ref.get("vars", {}), dict(bound.values or ())
        changed = {k: [was.get(k), v] for k, v in now.items() if was.get(k) != v}
        for role, data in bound.files:
            path = s.config.files.get(role)
            if path is None or ROLE_PREFIX + role in diffs:
                continue  # no such file here, or edited by hand (listed among the differences)
            try:
                on_disk: bytes | None = s.target.agent.read(path)
            except FileNotFoundError:
                on_disk = None
            if on_disk == data:
                continue
            old = (on_disk or b"").decode("utf-8", "replace").splitlines(keepends=True)
            new = data.decode("utf-8", "replace").splitlines(keepends=True)
            diff = list(difflib.unified_diff(old, new, path, f"{path} (as `apply` would write it)"))
            out.append(
                {
                    "patchset": ps.ident,
                    "name": ps.name,
                    "role": role,
                    "path": path,
                    "vars": changed,
                    "why": None,
                    "would_write": data.decode("utf-8", "replace"),
                    "diff": diff,
                }
            )
    return out


def _label(s: Session, current: State) -> str:
    """The state's name; after a repair (the same code under an id of its own), the name of the state
    it repaired, marked so: `baseline, repaired`."""
    if current.name:
        return current.name
    entries = s.ledger.entries()
    i = len(entries) - 1
    while i >= 0 and entries[i].kind in ("repair", "verify"):
        i -= 1
    if i == len(entries) - 1 or i < 0:  # no repair made the current state
        return ""
    before = entries[i].after
    same = before.manifest == current.manifest and list(before.stack) == list(current.stack)
    return f"{before.name}, repaired" if same and before.name else ""


def _where(s: Session) -> str:
    """` -t NAME` for a command hinted about a target other than the default one."""
    return f" -t {s.target.name}" if s.target.name != s.workspace.default_target else ""


def _print_stale(item: dict[str, Any], where: str) -> None:
    if item["why"]:
        print(f"out of date: {item['patchset']} no longer renders for this target: {item['why']}")
        return
    changed = ", ".join(
        f"{k} ({one_line(str(a))} -> {one_line(str(b))})" for k, (a, b) in item["vars"].items()
    )
    print(
        f"out of date: {item['path']} (role {item['role']} of {item['patchset']}) is not what the workspace renders "
        f"now{': ' + changed + ' changed since it was applied' if changed else ''}; "
        f"`patchkeeper apply {item['name']}{where}` would write:"
    )
    for line in item["diff"][2:]:
        print("  " + one_line(line.rstrip("\n")))


def _hint(s: Session, told: installation.Told) -> str:
    change = told.change
    if change.kind == "version":
        return (
            f"{change.pin(s.target.info.python)} brings back the release state {change.state.id} was recorded "
            f"with; then `patchkeeper status{_where(s)}` again"
        )
    if change.kind == "record":
        return f"reinstall it: {change.pin(s.target.info.python)} --force-reinstall"
    names = " ".join(p["name"] for p in change.state.stack)
    return (
        f"`patchkeeper apply {names}{_where(s)}` puts the patch sets' files back"
        if names
        else f"`patchkeeper rollback{_where(s)} --to {change.state.id}` puts the state's files back"
    )


def _as_dict(command: units.Command | str | None) -> dict[str, Any] | None:
    if command is None:
        return None
    return units.as_dict(command)  # the unit files' reading; the document's "manager": systemd's


def _print_unit(s: Session, exec_start: units.Command | str | None) -> None:
    """The host's unit, the drop-in (whether it is there) and the ExecStart they make together."""
    roles = s.config.files
    if "unit" not in roles:
        return

    print(f"unit     {roles['unit']} (the host's: read, not written)")
    if "dropin" in roles:
        there = s.target.agent.lstat(roles["dropin"]) is not None
        print(
            f"drop-in  {roles['dropin']} ({'present' if there else 'absent: the unit runs as the host wrote it'})"
        )
    for line in units.describe(exec_start):
        print(line)


def _head(s: Session, current: State | None) -> dict[str, Any]:
    """The target, where its package is, and its current state: the head of a status document."""
    info = s.target.info
    return {
        "target": s.target.name,
        "host": info.host,
        "package": info.package,
        "version": info.version,
        "site": info.site,
        "state_dir": info.state_dir,
        "state": current.to_dict() if current else None,
    }


def _one_doc(ws: Workspace, name: str) -> dict[str, Any]:
    with Session(ws, name, "status", write=False) as s:
        current = s.ledger.current()
        told = installation.told(s.target, s.ledger, s.installation())
        view = manager.ask(s.target)
        return {
            "need_daemon_reload": bool(manager.debts(s.target, view, None)),
            **_head(s, current),
            "differences": plans.drift(s.target, current.manifest) if current else {},
            "installation": told.to_dict() if told else None,
        }


def status_all(ws: Workspace, as_json: bool) -> int:
    """Every target at once, one row each: state, stack, whether the files match it."""

    results = each(ws, _one_doc, "status")
    errors = [n for n, r in results.items() if isinstance(r, Failed)]
    troubled = any(
        not isinstance(r, Failed)
        and ((r.get("installation") or {}).get("trouble") or r["need_daemon_reload"])
        for r in results.values()
    )
    if as_json:
        emit_json({n: (r.to_dict() if isinstance(r, Failed) else r) for n, r in results.items()})
        return 2 if errors else 1 if troubled else 0
    rows = []
    for n, r in results.items():
        if isinstance(r, Failed):
            rows.append([n, "-", "-", f"error: {r}"])
            continue
        state = r["state"]
        stack = " + ".join(f"{p['name']}@{p['version']}" for p in state["stack"]) if state else ""
        diffs = len(r["differences"])
        told = r.get("installation")
        rows.append(
            [
                n,
                f"{r['package']} {r['version']}",
                state["id"] if state else "-",
                (
                    "no recorded state"
                    if state is None
                    else f"{stack or '(no patch sets)'}; "
                    + (f"{diffs} file(s) differ" if diffs else "files match")
                    + (f"; {told['what']}" if told else "")
                    + (
                        "; systemd runs the old command line (NeedDaemonReload=yes)"
                        if r["need_daemon_reload"]
                        else ""
                    )
                ),
            ]
        )
    table(["target", "package", "state", "stack; files"], rows)
    print(f"{len(results)} target(s): {failures(results.values())}")
    return 2 if errors else 1 if troubled else 0
