"""Every target of a workspace at once (`--all`), on concurrent.futures pools: SSH targets on
threads (their work is mostly waiting on the host, up to HOSTS at once), local targets in worker
processes, one per CPU (their work is hashing and walking in Python, which threads would run one at
a time under the GIL). A target that fails (unreachable, refused) becomes its one-line error, and so
does one whose run raised anything else, or whose worker process died: every target is reported,
every other target still finishes. On a terminal, stderr shows done/total.
"""

from __future__ import annotations

import multiprocessing
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import PatchkeeperError, Unreachable, error_document
from ..host.disk import cpus
from ..workspace import Workspace

if TYPE_CHECKING:
    from concurrent.futures import Executor

HOSTS = 32  # SSH targets in flight at once
T = TypeVar("T")


@dataclass(frozen=True)
class Failed:
    """A target whose run failed: its one line, what to do next, and the exit code it would have had."""

    message: str
    hint: str = ""
    exit: int = 2
    unreachable: bool = False  # the connection failed (else it answered wrongly, or refused)

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, Any]:
        """A target's result in an --all --json document when it failed."""
        return error_document(self.message, self.hint, self.exit)


def failures(results: Iterable[object]) -> str:
    """How many targets failed, in words: "1 unreachable, 1 in error" (a host that answers with a wrong
    python is no unreachable one)."""
    failed = [r for r in results if isinstance(r, Failed)]
    away = sum(f.unreachable for f in failed)
    return f"{away} unreachable" + (f", {len(failed) - away} in error" if len(failed) > away else "")


def _guarded(work: Callable[[Workspace, str], T], ws: Workspace, name: str) -> T | Failed:
    try:
        return work(ws, name)
    except PatchkeeperError as exc:
        return Failed(str(exc.message).splitlines()[0], exc.hint, exc.exit_code, isinstance(exc, Unreachable))
    except OSError as exc:
        return Failed(
            f"{exc.strerror or exc}{': ' + str(exc.filename) if exc.filename else ''}",
            "check the path and its permissions",
        )


def _failed(exc: BaseException) -> Failed:
    """A target whose run raised past _guarded (a bug, or its worker process died)."""

    if isinstance(exc, BrokenProcessPool):
        return Failed("its worker process ended before it answered", "run the command on that target alone")
    return Failed(
        f"internal error: {type(exc).__name__}: {exc}".splitlines()[0], "please report this as a bug"
    )


def each(
    ws: Workspace, work: Callable[[Workspace, str], T], what: str, progress: bool | None = None
) -> dict[str, T | Failed]:
    """`work(ws, name)` for every target, concurrently; name -> its result, or how it failed.

    `work` and its result must be picklable (a local target's runs in a worker process: `work` a
    module-level function or a partial of one)."""

    names = sorted(ws.targets)
    remote = [n for n in names if ws.targets[n].ssh]
    local = [n for n in names if not ws.targets[n].ssh]
    show = sys.stderr.isatty() if progress is None else progress
    results: dict[str, T | Failed] = {}
    pools: list[Executor] = []
    try:
        futures: dict[Future[Any], str] = {}
        if remote:
            pools.append(ThreadPoolExecutor(min(len(remote), HOSTS)))
            futures.update({pools[-1].submit(_guarded, work, ws, n): n for n in remote})
        if local:
            pools.append(_local_pool(len(local)))
            futures.update({pools[-1].submit(_guarded, work, ws, n): n for n in local})
        for future in as_completed(futures):
            try:
                results[futures[future]] = future.result()
            except Exception as exc:  # reported as that target's line, never lost
                results[futures[future]] = _failed(exc)
            if show:
                sys.stderr.write(f"\r{what} --all: {len(results)}/{len(names)} target(s) done")
                sys.stderr.flush()
    finally:
        for pool in pools:
            pool.shutdown(wait=True, cancel_futures=True)
        if show and names:
            sys.stderr.write("\r" + " " * 60 + "\r")
            sys.stderr.flush()
    return {n: results[n] for n in names}


def _local_pool(count: int) -> Executor:
    """Worker processes for local targets, one per CPU (at most `count`), started fresh (spawn: a
    new interpreter, nothing of this process copied into it)."""

    for stream in (sys.stdout, sys.stderr):  # what a worker writes follows what this process wrote
        stream.flush()
    return ProcessPoolExecutor(min(count, cpus()), mp_context=multiprocessing.get_context("spawn"))


def table(head: list[str], rows: list[list[str]]) -> None:
    """Aligned columns; the last column is free text."""
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head) - 1)]
    for row in [head, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
