"""Every target of a workspace at once (`--all`): SSH targets on threads, local targets in processes.

Work on an SSH target is mostly waiting on its host, so those run on a thread pool sized for
waiting (up to HOSTS at once); work on a local target is hashing and walking in Python, so those
run in forked processes, at most one per core. A target that fails (unreachable, refused) becomes
its one-line error; every other target still finishes. On a terminal, stderr shows done/total.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, TypeVar

from ..errors import PatchkeeperError
from ..workspace import Workspace

HOSTS = 32  # SSH targets in flight at once
T = TypeVar("T")


def _guarded(work: Callable[[Workspace, str], T], ws: Workspace, name: str) -> T | str:
    try:
        return work(ws, name)
    except PatchkeeperError as exc:
        return str(exc).splitlines()[0]
    except OSError as exc:
        return f"{exc.strerror or exc}{': ' + str(exc.filename) if exc.filename else ''}"


def each(ws: Workspace, work: Callable[[Workspace, str], T], what: str,
         progress: bool | None = None) -> dict[str, T | str]:
    """`work(ws, name)` for every target, concurrently; name -> its result, or its error line.

    `work` must be a module-level function (local targets run it in a forked process)."""
    from concurrent.futures import ThreadPoolExecutor, as_completed  # the process pool only where used
    from functools import partial

    names = sorted(ws.targets)
    remote = [n for n in names if ws.targets[n].ssh]
    local = [n for n in names if not ws.targets[n].ssh]
    show = sys.stderr.isatty() if progress is None else progress
    results: dict[str, T | str] = {}
    job = partial(_guarded, work, ws)
    futures = {}
    threads = ThreadPoolExecutor(max_workers=max(1, min(len(remote), HOSTS)))
    procs = None
    try:
        if len(local) > 1:  # forked first, before any thread of ours runs
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            from ..host.disk import cpus, no_split

            procs = ProcessPoolExecutor(max_workers=max(1, min(len(local), cpus())),
                                        mp_context=multiprocessing.get_context("fork"), initializer=no_split)
            for n in local:
                futures[procs.submit(job, n)] = n
        elif local:
            futures[threads.submit(job, local[0])] = local[0]
        for n in remote:
            futures[threads.submit(job, n)] = n
        for done, future in enumerate(as_completed(futures), 1):
            results[futures[future]] = future.result()
            if show:
                sys.stderr.write(f"\r{what} --all: {done}/{len(names)} target(s) done")
                sys.stderr.flush()
    finally:
        threads.shutdown(wait=True)
        if procs is not None:
            procs.shutdown(wait=True)
        if show and names:
            sys.stderr.write("\r" + " " * 60 + "\r")
            sys.stderr.flush()
    return {n: results[n] for n in names}


def table(head: list[str], rows: list[list[str]]) -> None:
    """Aligned columns; the last column is free text."""
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head) - 1)]
    for row in [head, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
