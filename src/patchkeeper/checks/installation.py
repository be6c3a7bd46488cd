"""The managed distribution's installation: what pip, uv or a person did to it since the state recorded it
(records/installed.py), and where the managed files stand then, told in one line."""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import NotInstalled, Refused, TargetError
from ..printable import one_line
from ..records.installed import Installed
from ..records.ledger import LedgerEntry
from .scan import compare

if TYPE_CHECKING:
    from ..records.ledger import Ledger, State
    from ..targets import Target


@dataclass(frozen=True)
class InstallChange:
    """How the installation differs from the one the current state recorded.

    kind: `version` (another release: upgraded or downgraded), `record` (the same release, but its
    RECORD no longer lists the release's files as it did: rows cut or edited), `reinstalled` (the
    same release installed again: RECORD rewritten, or another installer)."""

    kind: str
    package: str
    then: Installed
    now: Installed
    state: State  # the state whose entry recorded `then`

    @property
    def since(self) -> str:
        return f"state {self.state.id} ({one_line(self.state.name or self.state.stack_text())})"

    def what(self) -> str:
        """One sentence: what happened to the package since the state was recorded."""
        p, then, now = self.package, self.then, self.now
        was, now_is = one_line(then.version), one_line(now.version)  # (the target's words: one line each)
        if self.kind == "version":
            verb = "upgraded" if _newer(now.version, then.version) else "downgraded"
            how = f"{verb} {was} -> {now_is}"
        elif self.kind == "record":
            return (
                f"{p}'s RECORD no longer lists the files of {p} {now_is} as it did when {self.since} was "
                f"recorded ({then.rows} rows of the release's files then, {now.rows} now)"
            )
        else:
            how = "reinstalled" + (
                f" by {one_line(now.installer)} (by {one_line(then.installer)} before)"
                if now.installer != then.installer and then.installer and now.installer
                else ""
            )
        return f"{p} was {how} outside patchkeeper since {self.since}"

    def pin(self, python: str) -> str:
        """The command that installs the release the state was recorded with."""
        return pin(python, self.package, self.then.version)


def _newer(a: str, b: str) -> bool:
    try:
        from packaging.version import Version  # lazy: tens of ms to import, off the fast paths

        return Version(a) > Version(b)
    except Exception:  # not PEP 440: by text
        return a > b


def pin(python: str, package: str, version: str) -> str:
    return f"{python} -m pip install {package}=={version} --no-deps"


def recorded(ledger: Ledger) -> tuple[LedgerEntry, Installed] | None:
    """The newest entry that recorded a state, and the installation it recorded (None when it
    recorded none: written before patchkeeper recorded installations, or no entry yet)."""
    entries = ledger.entries()
    for i in reversed(range(len(entries))):
        if entries.slots[i].kind == "verify":
            continue
        entry = entries[i]
        return (entry, Installed.from_dict(entry.installed)) if entry.installed else None
    return None


def check(target: Target, ledger: Ledger) -> InstallChange | None:
    """What happened to the managed distribution since the current state recorded it; None when it
    is the installation recorded (or none was recorded)."""
    found = recorded(ledger)
    if found is None or target.info.installation is None:  # (an agent of an older patchkeeper cannot say)
        return None
    entry, then = found
    now = Installed.of(target.info)
    if (now.dist_info, now.version) != (then.dist_info, then.version):
        kind = "version"
    elif then.files and now.files != then.files:
        kind = "record"
    elif (then.record and now.record != then.record) or (then.installer and now.installer != then.installer):
        kind = "reinstalled"
    else:
        return None
    return InstallChange(kind, target.info.package, then, now, entry.after)


def refuse_writes(
    change: InstallChange | None, target: Target, verb: str, reinstall_ok: bool = False
) -> None:
    """Refuse a change that would record a state over an installation other than the one the current
    state recorded, naming what happened and what would do. Another release is no reason: the first
    change after it records that release's baseline (change/adopt.py). `reinstall_ok`: nor is a
    reinstall of the same release (apply puts the state's files back, rollback gives a state's)."""
    if change is None or change.kind == "version" or (reinstall_ok and change.kind == "reinstalled"):
        return
    if change.kind == "record":
        raise Refused(
            f"{change.what()}: `{verb}` is refused",
            f"reinstall it (`{change.pin(target.info.python)} --force-reinstall`), then run the command again",
        )
    raise Refused(
        f"{change.what()}: `{verb}` would record its files as the state's",
        "bring the state's files back first: `patchkeeper apply NAME` of an applied patch set, "
        "or `patchkeeper rollback --to STATE`; both record the new installation",
    )


def state_version(ledger: Ledger, state: State) -> str | None:
    """The release a state was recorded with: from the installation its entries recorded, else the
    package version a baseline or snapshot noted (None when unknown)."""
    for entry in ledger.entries().newest(state.id):
        if entry.kind == "verify":
            continue
        if entry.installed:
            return str(entry.installed.get("version") or "") or None
        noted = dict(entry.extra).get("package_version")
        if noted:
            return str(noted)
    return None


def removed(target: Target, exc: NotInstalled) -> TargetError:
    """The error for a managed package that is not installed, naming the state it was removed
    since and pinning the release that state needs (read from the newest entries of its ledger)."""
    agent, ledger_dir = target.agent, posixpath.join(exc.state_dir, "ledger")
    try:
        names = sorted((n for n in agent.listdir(ledger_dir) if n.endswith(".json")), reverse=True)
    except (OSError, TargetError):
        return exc
    state: State | None = None
    version = None
    for name in names[:64]:
        try:
            entry = LedgerEntry.from_dict(json.loads(agent.read(posixpath.join(ledger_dir, name))))
        except (OSError, ValueError, KeyError, TypeError, AttributeError, TargetError):
            continue  # damaged: the ledger's own reading says so once the package is back
        if entry.kind == "verify":
            continue
        state = state or entry.after
        version = (entry.installed or {}).get("version") or dict(entry.extra).get("package_version")
        if version:
            break
    if state is None or not version:
        return exc
    package, python = target.config.package, target.config.python
    return TargetError(
        f"{exc.message}: {package} was removed outside patchkeeper since state {state.id} "
        f"({one_line(state.name or state.stack_text())}), recorded with {package} {one_line(str(version))}",
        f"install the release that state needs: {pin(python, package, one_line(str(version)))}; then "
        "`patchkeeper status` says what to do to bring its files back",
    )


@dataclass(frozen=True)
class Told:
    """A change of the installation as reading commands tell it: one line, and whether the state no
    longer holds (status, audit and diff then exit 1). A reinstall that left every managed file as
    the state recorded it is told, but the state still holds."""

    change: InstallChange
    line: str
    trouble: bool
    released: tuple[str, ...] = ()  # the keys the state changed that are back to the release's bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "change": self.change.kind,
            "what": self.line,
            "state": self.change.state.id,
            "then": self.change.then.to_dict(),
            "now": self.change.now.to_dict(),
            "trouble": self.trouble,
            "released": list(self.released),
        }


def told(target: Target, ledger: Ledger, change: InstallChange | None) -> Told | None:
    """`tell`, where the installation changed (None where it is as the current state recorded it)."""
    return tell(target, ledger, change) if change is not None else None


def tell(target: Target, ledger: Ledger, change: InstallChange) -> Told:
    """`change` with where the managed files stand: compared on the target with the current state and
    the baseline (one scan), the files the state changed from the baseline (the patch sets' files,
    and any hand edit a snapshot recorded) that are back to the baseline's, the release's, bytes."""
    current, base = change.state, ledger.baseline()
    if change.kind == "version" or base is None or base.manifest == current.manifest:
        (differ,) = compare(target, current.manifest)
        files = (
            f"{len(differ)} managed file(s) differ from the state" if differ else "its files match the state"
        )
        if change.kind == "version" and differ:
            files += f" (they are {change.now.version}'s)"
        return Told(change, f"{change.what()}; {files}", change.kind != "reinstalled" or bool(differ))
    to_current, to_base = compare(target, current.manifest, base.manifest)
    rows_now, rows_base = ledger.load_manifest(current), ledger.load_manifest(base)
    changed = sorted(k for k in rows_now.keys() | rows_base.keys() if rows_now.get(k) != rows_base.get(k))
    released = tuple(k for k in changed if k in to_current and k not in to_base)
    what = current.stack_text() if current.stack else "the state"
    if released:
        files = f"{len(released)} of the {len(changed)} files {what} changes are back to the release's bytes"
    elif to_current:
        files = f"{len(to_current)} managed file(s) differ from the state"
    else:
        files = "its files match the state"
    return Told(
        change, f"{change.what()}; {files}", change.kind != "reinstalled" or bool(to_current), released
    )
