"""The patchkeeper.core.patchset action's work on one host: `present` applies a patch set (switching
within its group), `absent` takes the host back to its baseline where the set is applied; check mode
plans, diff mode gives each file's before and after. The result is a dict Ansible understands."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import replace
from typing import Any

from . import workspace
from .change.rollout import PREVIOUS_FAILS, Done, HostResult
from .change.session import Session
from .commands.apply import apply
from .commands.rollback import rollback
from .errors import EXIT_ROLLED_BACK, PatchkeeperError
from .patchset import saving
from .records.ledger import ORIGIN
from .targets.ansible_link import AnsibleTarget, check

MAX_DIFF = 1 << 20  # bytes of one side of a file diff; larger files are named, not shown


def run_task(
    root: str | None,
    host: str,
    table: dict[str, Any],
    connection: Any,
    name: str,
    state: str,
    verify: bool,
    check_mode: bool,
    diff_mode: bool,
    origin: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Everything patchkeeper prints goes into the result's `stdout`; an error fails the task with
    patchkeeper's one line (`msg`) and its hint. `origin` (the playbook, play and task) goes into
    the ledger entries of the change."""

    out = io.StringIO()
    done: list[Done] = []
    diffs: list[dict[str, str]] = []
    result: dict[str, Any] = {"changed": False, "state_before": None, "state_after": None}
    try:
        with redirect_stdout(out), redirect_stderr(out):
            check(connection, host)
            ws_root = workspace.find(root)
            table = dict(table)
            table.setdefault("ssh", f"ansible:{host}")  # paths are the host's, taken as given
            ws = workspace.load(ws_root, hosts={host: table})
            for line in saving.recover(ws.patchsets_dir):  # a save of a patch set a crash interrupted
                print(f"patchkeeper: note: {line}")
            config = replace(ws.target(host), connect=lambda c: AnsibleTarget(c, connection))
            ws = replace(ws, targets={host: config})

            def noted(d: Done) -> None:
                done.append(d)
                if diff_mode and d.plan is not None and d.target is not None:
                    diffs.extend(file_diffs(d))

            token = ORIGIN.set({"via": "ansible", **{k: v for k, v in (origin or {}).items() if v}})
            try:
                code = _change(ws, host, name, state, verify, check_mode, noted)
            finally:
                ORIGIN.reset(token)
    except PatchkeeperError as exc:
        return dict(
            result,
            failed=True,
            rc=exc.exit_code,
            msg=f"patchkeeper: error: {exc.message}",
            hint=exc.hint,
            stdout=out.getvalue(),
        )
    line = HostResult(host, code, done[-1] if done else None, None, "").line()
    d = done[-1] if done else None
    result.update(
        rc=code,
        msg=line,
        stdout=out.getvalue(),
        stdout_lines=out.getvalue().splitlines(),
        state_before=d.before if d else None,
        state_after=d.after if d else None,
        changed=bool(d and d.before != d.after),
    )
    if diff_mode:
        result["diff"] = diffs
    if d is not None and d.rolled_back:
        result.update(
            rolled_back=d.rolled_back,
            previous_state_fails=d.previous_fails is not None,
            verdict=PREVIOUS_FAILS if d.previous_fails else "the patch set fails verification",
        )
    if code != 0:
        result["failed"] = True
        if code == EXIT_ROLLED_BACK:
            result["msg"] = f"patchkeeper: {line}"
    return result


def _change(ws: Any, host: str, name: str, state: str, verify: bool, dry_run: bool, noted: Any) -> int:
    if state == "present":
        return apply(ws, host, name, dry_run, False, verify=verify, noted=noted)
    with Session(
        ws, host, "status", write=False, hands_off=dry_run
    ) as s:  # absent: is the set applied at all?
        current = s.ledger.current()
        if current is None or name not in [p["name"] for p in current.stack]:
            print(f"{host}: {name} is not applied; nothing to do")
            noted(
                Done(
                    current.id if current else None,
                    current.id if current else None,
                    False,
                    False,
                    note=f"{name} is not applied",
                )
            )
            return 0
    return rollback(ws, host, "baseline", dry_run, verify=verify, noted=noted)


def file_diffs(d: Done) -> list[dict[str, str]]:
    """Each file of the plan: its path, the text before and after (Ansible renders the diff)."""
    assert d.plan is not None and d.target is not None
    target, plan = d.target, d.plan
    store = target.info.store

    def text(entry: Any, path: str, planned: bool) -> str:
        if entry is None:
            return ""
        data = plan.contents.get(entry.digest) if planned else None
        try:
            if data is None:
                data = target.agent.store_get(store, entry.digest)
        except (PatchkeeperError, FileNotFoundError):
            try:
                data = target.agent.read(path)  # a dry run: the file as it is
            except (PatchkeeperError, FileNotFoundError):
                return "(its bytes are not kept)\n"
        if len(data) > MAX_DIFF or b"\0" in data[:8192]:
            return f"({len(data)} bytes, binary or too large to show)\n"
        return data.decode("utf-8", "replace")

    return [
        {
            "before_header": op.path,
            "after_header": op.path,
            "before": text(op.old, op.path, False),
            "after": text(op.new, op.path, True),
        }
        for op in plan.ops
    ]
