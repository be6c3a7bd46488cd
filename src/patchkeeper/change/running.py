"""Did a change take effect? After a restart, the manager's account of the unit: a new main process
started after the change, running the argv and environment systemd loaded, with no daemon-reload owed;
and the process listening on the service's port runs the unit's effective command line."""

from __future__ import annotations

import shlex
import time
from dataclasses import replace
from typing import Any

from ..checks import manager, units
from ..host import probe_http
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


# ---- the server on the port is the one the unit starts ------------------------------------------
def port_of(base_url: str) -> int:
    """The port the service answers on (where the server check looks for the listening process)."""
    return probe_http.split_url(base_url)[2]


def server_check(
    command: units.Command | str, listener: dict[str, Any] | None, unasked: str | None = None
) -> Check:
    """Does a process listening on the port run the unit's effective command line (the manager's, where
    it answered)? Unknowable is said, not failed. `unasked`: why no manager was asked, where `command`
    is the unit files' reading, which the check then says."""
    checked = _server_check(command, listener)
    if unasked is None:
        return checked
    return replace(checked, detail=f"{checked.detail} (a reading of the unit files: {unasked})")


def _server_check(command: units.Command | str, listener: dict[str, Any] | None) -> Check:
    if isinstance(command, str):
        return Check("server", True, 0.0, f"not checked: {command}", skipped=True)
    if command.problem:
        return Check(
            "server",
            True,
            0.0,
            f"not checked: the unit's command line depends on more than the unit ({command.problem})",
            skipped=True,
        )
    if not listener or "processes" not in listener:
        why = (listener or {}).get("error", "the probe did not look")
        return Check("server", True, 0.0, f"not checked: {why}", skipped=True)
    procs = listener["processes"]
    want = list(command.argv)
    for proc in procs:
        if proc["argv"] == want:
            return Check(
                "server",
                True,
                0.0,
                f"pid {proc['pid']} runs the unit's effective ExecStart (from {command.source})",
            )
    readable = [p for p in procs if p["argv"] is not None]
    if not readable:
        return Check(
            "server",
            True,
            0.0,
            f"not checked: the command line of pid {procs[0]['pid']} could not be read",
            skipped=True,
        )
    shown = readable[0]
    return Check(
        "server",
        False,
        0.0,
        f"the process on the port, pid {shown['pid']}, is not running the unit's effective ExecStart "
        "(an old server still on the port, a daemon-reload that did not happen, a second unit?)",
        f"running:  {shlex.join(shown['argv'])}\nthe unit: {shlex.join(want)}\n"
        f"(the unit's effective ExecStart is from {command.source}; read: {', '.join(command.files)})",
        reason="stale-server",
    )
