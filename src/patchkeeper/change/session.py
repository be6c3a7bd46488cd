"""Open a target for a command: its ledger, its lock, recovery of an interrupted transaction."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ..checks import installation
from ..errors import NotInstalled, Refused, Unfinished
from ..host.disk import TEMP_PREFIX
from ..printable import one_line
from ..records import history, statedir
from ..records.ledger import Ledger, LedgerEntry
from ..targets import Target, open_target
from ..workspace import Workspace
from . import transaction

if TYPE_CHECKING:
    from ..checks.installation import InstallChange
    from ..patchset.patchset import Library

READ_WAIT = 5.0  # seconds a reading command waits for a change under way to end (its lock)
# Set (to "1") in a process that must not finish or undo a transaction it finds (`patchkeeper mcp
# --read-only` sets it for itself and the workers it starts): its sessions refuse one instead.
READ_ONLY = "PATCHKEEPER_READ_ONLY"


class Session:
    """`with Session(ws, name, "apply ddtree") as s:` locks the target and recovers it first.

    With `write=False` the lock is taken only when an interrupted transaction must be recovered.
    With `hands_off` (a dry run, `check`, Ansible's check mode) nothing at all is written on the host:
    no state dir, lock, cache or seal, and an interrupted transaction is not recovered but refused.
    What the command copied into the workspace's snapshots/ (`record`) is committed once as it ends;
    with `commit=False` the caller takes the record (a worker of --all: one commit for them all).
    """

    def __init__(
        self,
        workspace: Workspace,
        target_name: str | None,
        command: str,
        write: bool = True,
        commit: bool = True,
        wait: float | None = None,
        rehash: bool = False,
        hands_off: bool = False,
    ) -> None:
        self.workspace = workspace
        self.wait = (
            (0.0 if write else READ_WAIT) if wait is None else wait
        )  # seconds to wait for another's lock
        self.rehash = rehash  # believe no cache kept between commands (audit --rehash)
        self.config = workspace.target(target_name)
        self.command = command
        self.write = write and not hands_off
        self.hands_off = hands_off
        self._target: Target | None = None
        self._ledger: Ledger | None = None
        self.recovered: str | None = None
        self.unfinished: Unfinished | None = None  # a committed transaction recovery could not finish
        self._locked = False
        self.record = history.Record(self.config.name, command)  # what changes.mirror copied, for one commit
        self._patchsets: Library | None = None
        self.commit = commit
        self._installation: tuple[int, InstallChange | None] | None = None

    @property
    def patchsets(self) -> Library:
        """The workspace's patch sets, each read once by this command (patchset.Library), made when a
        step first asks: a command that reads none (audit, status of a target with no patch set
        applied) does not load the patch sets' reader (parsing, patching, templates)."""
        if self._patchsets is None:
            from ..patchset.patchset import Library  # lazy own: only commands that read a patch set load it

            self._patchsets = Library(self.workspace.patchsets_dir)
        return self._patchsets

    @property
    def target(self) -> Target:
        """The open target (inside the `with` block)."""
        if self._target is None:
            raise RuntimeError("the session is not open")
        return self._target

    @property
    def ledger(self) -> Ledger:
        """The target's ledger (inside the `with` block)."""
        if self._ledger is None:
            raise RuntimeError("the session is not open")
        return self._ledger

    def installation(self) -> InstallChange | None:
        """What pip, uv or a person did to the managed distribution since the current state recorded
        it (installation.check), found once per command; None: it is as recorded."""
        newest = len(self.ledger.entries())  # found again once the command records a state (a new baseline)
        if self._installation is None or self._installation[0] != newest:
            self._installation = (newest, installation.check(self.target, self.ledger))
        return self._installation[1]

    def warn_installation(self) -> None:
        """For a command that reads the target without telling its installation itself: what pip, uv
        or a person did to the managed distribution since the current state, on stderr."""
        change = self.installation() if self.ledger.current() is not None else None
        if change is not None:
            print(
                f"patchkeeper: warning: {self.target.name}: {change.what()} (`patchkeeper status` says what "
                "to do)",
                file=sys.stderr,
            )

    def __enter__(self) -> Session:
        self._target = open_target(self.config)
        self._target.fresh = self.rehash
        try:
            if self.hands_off:
                self._target.agent.hands_off()
            try:
                statedir.check_workspace(self._target, self.workspace.root)
                statedir.check(self._target, claim=self.write)
            except NotInstalled as exc:  # named with the state it was removed since, and the release it needs
                raise installation.removed(self._target, exc) from None
            self._ledger = Ledger(self._target, indexed=not self.rehash)
            read_only = os.environ.get(READ_ONLY) == "1"
            if (self.hands_off or read_only) and self.target.agent.lstat(
                self.ledger.journal_path
            ) is not None:
                why = (
                    "this patchkeeper is read-only (patchkeeper mcp --read-only)"
                    if read_only
                    else f"`{self.command}` writes nothing"
                )
                raise Refused(
                    f"target {self.target.name} has a transaction under way or interrupted (its journal is "
                    f"there); {why}, so it neither waits for it nor finishes or undoes it",
                    f"if a change is running on {self.target.name}, wait for it to end; if not, run "
                    f"`patchkeeper recover -t {self.target.name}` from a shell",
                )
            if (self.write or self.target.agent.lstat(self.ledger.journal_path) is not None) and self._lock():
                self._clean()
                try:
                    self.recovered = transaction.recover(self.ledger)
                except Unfinished as exc:
                    if self.write:
                        raise  # no further change on a target that is between two states
                    self.unfinished = exc  # a reading command still reads, and says so
                    print(f"patchkeeper: warning: {exc}", file=sys.stderr)
                except transaction.JournalDamaged as exc:
                    if self.write:
                        raise
                    print(f"patchkeeper: warning: {exc}", file=sys.stderr)  # a read-only verb goes on
                if self.recovered:
                    print(f"recovered {self.target.name}: {self.recovered}", file=sys.stderr)
            if self.write:
                self._commit_left_over()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _lock(self) -> bool:
        """Take the target's lock; False when a reading command, waiting up to `wait` seconds for
        another command's change, saw it end (its journal gone: nothing to recover, no lock needed)."""
        agent = self.target.agent
        deadline = time.monotonic() + self.wait
        told = False
        while True:
            holder = agent.lock(self.ledger.lock_path, {"command": self.command})
            if holder is None:
                self._locked = True
                return True
            if not self.write and agent.lstat(self.ledger.journal_path) is None:
                return False
            if time.monotonic() >= deadline:
                break
            if not told:
                print(
                    f"{self.target.name}: locked by pid {holder.pid} running `{one_line(holder.command)}`; "
                    f"waiting up to {self.wait:g} s for it",
                    file=sys.stderr,
                    flush=True,
                )
                told = True
            time.sleep(0.1)
        try:
            since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(holder.since)))
        except (TypeError, ValueError, OverflowError, OSError):
            since = "?"
        longer = (
            " (`patchkeeper audit --wait SECONDS` waits longer)" if self.command.startswith("audit") else ""
        )
        raise Refused(
            f"target {self.target.name} is locked by pid {holder.pid} on {one_line(holder.host)} "
            f"running `{one_line(holder.command)}` since {since}",
            f"wait for it to finish{longer}, then run the command again; if that process is gone from another "
            f"host, remove {self.ledger.lock_path}",
        )

    def _say_done(self) -> None:
        """Ctrl-C came after a change was made and its records copied: say it is done."""
        for e in self.record.entries:
            if e.kind != "verify":
                print(
                    f"{self.target.name}: done before Ctrl-C: {e.kind} {e.after.stack_text()} "
                    f"(transaction {e.id}, state {e.before.id if e.before else '-'} -> {e.after.id}, "
                    f"{len(e.changed)} file(s) changed); its record is committed to the workspace",
                    file=sys.stderr,
                    flush=True,
                )

    def _left_over(self) -> tuple[list[Path], list[LedgerEntry]]:
        """The target's records in snapshots/ that an interrupted command copied and did not commit,
        and the ledger entries among them."""
        out = self.workspace.snapshots_dir / self.target.name
        paths = [  # a temporary file of a copy cut short is no record (the next mirror writes the copy)
            p for p in history.uncommitted(self.workspace.root, out) if not p.name.startswith(TEMP_PREFIX)
        ]
        if not paths:
            return [], []
        names = {p.name for p in paths if p.parent.name == "ledger"}
        entries = self.ledger.entries()
        return paths, [entries[i] for i, slot in enumerate(entries.slots) if slot.name in names]

    def _commit_left_over(self) -> None:
        """A change command (it holds the target's lock, so no other command is between copying and
        committing this target's records) commits what an interrupted one left, as a commit of its own."""
        paths, entries = self._left_over()
        if not paths:
            return
        record = history.Record(self.target.name, self.command, [str(p) for p in paths], entries)
        subject = record.subject() if entries else f"{self.target.name}: records copied into the workspace"
        body = [
            *record.body(),
            "",
            f"left uncommitted by an interrupted command; committed by `patchkeeper {self.command}`",
        ]
        with _no_interrupts():
            commit = history.commit_paths(
                self.workspace.root, paths, subject + "\n\n" + "\n".join(body) + "\n"
            )
        if commit is not None:
            print(
                f"{self.target.name}: committed the record an interrupted command left uncommitted in the "
                f"workspace: {subject.removeprefix(self.target.name + ': ')}",
                file=sys.stderr,
            )

    def say_left_over(self) -> None:
        """For a reading command (`status`): say that a record is left uncommitted; it does not commit it
        (a change under way on the target may be about to, under its own name)."""
        paths, entries = self._left_over()
        if not paths:
            return
        what = ", ".join(f"{e.kind} {e.after.stack_text()} (transaction {e.id})" for e in entries) or (
            f"{len(paths)} file(s)"
        )
        print(
            f"patchkeeper: warning: {self.target.name}: the record of {what} is in "
            f"snapshots/{self.target.name}/ but not committed to the workspace's git (a command was "
            "interrupted); the next change or `patchkeeper recover` commits it",
            file=sys.stderr,
        )

    def _clean(self) -> None:
        """Remove the temporary files an interrupted command left in the target's state dir and store."""
        info = self.target.info
        removed = self.target.agent.clean_temps(info.state_dir, info.store)
        if removed:
            size = sum(s for _, s in removed)
            print(
                f"{self.target.name}: removed {len(removed)} temporary file(s) ({size / 1e6:.1f} MB) "
                "left by an interrupted command",
                file=sys.stderr,
            )

    def __exit__(self, *exc: object) -> None:
        if self.commit and self.record.paths:
            if isinstance(exc[1], KeyboardInterrupt):
                self._say_done()
            with _no_interrupts():  # Ctrl-C (again) would leave the copies uncommitted
                history.commit_records(self.workspace.root, [self.record])
            self.record = history.Record(self.config.name, self.command)
        if self._locked:
            self.target.agent.unlock(self.ledger.lock_path)
            self._locked = False
        if self._target is not None:
            self._target.close()


@contextmanager
def _no_interrupts() -> Iterator[None]:
    """SIGINT ignored for the duration (in the main thread, where Python handles it)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
