"""Did a change take effect? After a restart, the manager's account of the unit: a new main process
started after the change, running the argv and environment systemd loaded, with no daemon-reload owed."""

from __future__ import annotations

import time
from dataclasses import replace

from ..checks import manager, units
from .smoke import Check

REASON = "not-effective"


def effect_check(
    view: manager.ManagerView | str | None,
    since: str = "",
    before: manager.ManagerView | str | None = None,
    reading: units.Command | str | None = None,
    dropins: list[tuple[str, bool]] | None = None,
) -> Check | None:
    """As `_effect`, with a disagreement between the unit files' reading and the manager shown;
    `dropins`: patchkeeper's drop-ins and whether each is on disk (manager.role_dropins)."""
    check = _effect(view, since, before, dropins or [])
    if check is None or not isinstance(view, manager.ManagerView):
        return check
    differs = manager.disagreement(view, reading)
    if not differs:
        return check
    said = f"the files' reading and systemd disagree; systemd's is taken: {differs}"
    return replace(check, output=(check.output + "\n" + said).strip(), warned=check.ok or check.warned)


def _effect(
    view: manager.ManagerView | str | None,
    since: str,
    before: manager.ManagerView | str | None,
    dropins: list[tuple[str, bool]],
) -> Check | None:
    """The `systemd` check; None where no manager answered (the server check then says that what runs
    is the unit files' reading, and why). `since`: the target's clock just before the restart (epoch
    seconds), `before`: the manager's view then."""
    if view is None or isinstance(view, str):
        return None
    start = time.monotonic()

    def failed(detail: str, output: str = "") -> Check:
        return Check(
            "systemd",
            False,
            time.monotonic() - start,
            f"the change did not take effect: {detail}",
            output,
            reason=REASON,
        )

    if view.load_state != "loaded":
        return failed(f"systemd has {view.unit} {view.load_state} ({view.load_error or 'no error given'})")
    owed = manager.owed(view, dropins)
    if owed:
        return failed("; ".join(owed))
    if not view.main_pid or view.active_state != "active":
        return failed(f"{view.unit} is {view.active_state or 'in no known state'} with no main process")
    said: list[str] = []
    if since:
        old = before if isinstance(before, manager.ManagerView) and before.main_pid else None
        if old is not None and old.main_pid == view.main_pid:
            return failed(f"the main process is pid {old.main_pid}, the one from before the restart")
        then = f"pid {old.main_pid} before it" if old is not None else "no main process before it"
        if view.main_started is None:
            said.append(
                f"pid {view.main_pid} is new ({then}); its start time was not given (ExecMainStartTimestamp)"
            )
        elif view.main_started < float(since) or (
            old is not None and old.main_started is not None and view.main_started <= old.main_started
        ):
            return failed(
                f"the main process pid {view.main_pid} started at {view.main_started:.6f}, before the restart "
                f"(which began in second {since}; {then})"
            )
        else:
            said.append(
                f"pid {view.main_pid} started after the restart (at {view.main_started:.6f}; the restart "
                f"began in second {since}; {then})"
            )
    runs, detail = view.runs_loaded()
    if runs is False:
        head, _, rest = detail.partition("\n")
        return failed(head, rest)
    said.append(detail if runs else f"not known: {detail}")
    env, env_detail = view.environment_loaded()
    if env is False:
        return failed(env_detail)
    said.append(env_detail if env else f"not known: {env_detail}")
    said.append("NeedDaemonReload=no")
    unknown = runs is None or env is None or (since and view.main_started is None)
    return Check("systemd", True, time.monotonic() - start, "; ".join(said), warned=bool(unknown))
