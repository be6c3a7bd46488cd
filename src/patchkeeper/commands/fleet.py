"""Every target of a workspace at once (`--all`): SSH targets on threads, local targets in processes.

Work on an SSH target is mostly waiting on its host, so those run on threads sized for waiting
(up to HOSTS at once); work on a local target is hashing and walking in Python, so those run in
forked processes, one per core, each claiming the next target from a shared pipe and sending its
result back on a pipe of its own (no process pool: its imports and start cost more than a warm
audit of a target). A target that fails (unreachable, refused) becomes its one-line error; every
other target still finishes; a target whose process died before answering is run again here, so
its error, if any, is raised here. On a terminal, stderr shows done/total.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, Iterator, TypeVar

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

    `work` must only compute (a local target's runs in a forked process: what it changes in memory
    is lost) and return a picklable value."""
    import threading
    from queue import SimpleQueue

    names = sorted(ws.targets)
    remote = [n for n in names if ws.targets[n].ssh]
    local = [n for n in names if not ws.targets[n].ssh]
    show = sys.stderr.isatty() if progress is None else progress
    results: dict[str, T | str] = {}

    def job(name: str) -> T | str:
        return _guarded(work, ws, name)

    workers: list[tuple[int, int]] = []
    if len(local) > 1:  # forked first, before any thread of ours runs
        from ..host.disk import cpus

        workers = fork_workers(job, local, min(len(local), cpus()))
    threaded = remote if workers else remote + local
    done: SimpleQueue = SimpleQueue()  # (name, result), or None when a reader or a thread has ended
    pending = iter(threaded)
    claim = threading.Lock()

    def run_threaded() -> None:
        try:
            while True:
                with claim:
                    name = next(pending, None)
                if name is None:
                    return
                done.put((name, job(name)))
        finally:
            done.put(None)

    def read_worker(fd: int) -> None:
        try:
            for index, value in answers(fd):
                done.put((local[index], value))
        finally:
            done.put(None)

    threads = [threading.Thread(target=read_worker, args=(fd,), daemon=True) for _, fd in workers]
    threads += [threading.Thread(target=run_threaded, daemon=True) for _ in range(min(len(threaded), HOSTS))]
    try:
        for thread in threads:
            thread.start()
        ended = 0
        while ended < len(threads):
            item = done.get()
            if item is None:
                ended += 1
                continue
            results[item[0]] = item[1]
            if show:
                sys.stderr.write(f"\r{what} --all: {len(results)}/{len(names)} target(s) done")
                sys.stderr.flush()
        for name in names:  # a target whose process died before answering: run here, its error raised here
            if name not in results:
                results[name] = job(name)
    finally:
        for thread in threads:
            thread.join()
        for pid, _ in workers:  # each pipe was closed by its reader
            os.waitpid(pid, 0)
        if show and names:
            sys.stderr.write("\r" + " " * 60 + "\r")
            sys.stderr.flush()
    return {n: results[n] for n in names}


def fork_workers(job: Callable[[str], object], names: list[str], count: int) -> list[tuple[int, int]]:
    """Fork `count` processes that run job(name) for the names each claims in turn from a pipe
    holding all their indices (so they end together however unequal the jobs), and send
    (index, result) back on a pipe of their own (read it with answers); [(pid, that pipe's read end)]."""
    import pickle

    from ..host import disk

    claims_r, claims_w = os.pipe()
    try:
        os.write(claims_w, b"".join(i.to_bytes(2, "little") for i in range(len(names))))  # < 64 KiB: a pipe's
    finally:
        os.close(claims_w)  # once all are claimed, a read gives b"": the end
    for stream in (sys.stdout, sys.stderr):  # or a child would write what was buffered here again
        stream.flush()
    workers: list[tuple[int, int]] = []
    try:
        for _ in range(count):
            r, w = os.pipe()
            try:
                pid = os.fork()
            except OSError:  # no more processes: those forked claim every name; none forked, threads do
                os.close(r)
                os.close(w)
                break
            if pid == 0:  # the child: its answers down its pipe, then out with none of the interpreter's teardown
                code = 1
                try:
                    os.close(r)
                    disk.allow_split(False)  # the CPUs are busy already: no second process for a long list
                    token = os.read(claims_r, 2)
                    while token:
                        index = int.from_bytes(token, "little")
                        data = pickle.dumps((index, job(names[index])), pickle.HIGHEST_PROTOCOL)
                        view = memoryview(len(data).to_bytes(4, "little") + data)
                        while view:
                            view = view[os.write(w, view):]
                        token = os.read(claims_r, 2)
                    code = 0
                finally:  # an error is the controller's to raise: it runs the unanswered name again
                    try:
                        sys.stdout.flush()
                        sys.stderr.flush()
                    finally:
                        os._exit(code)
            os.close(w)
            workers.append((pid, r))
    finally:
        os.close(claims_r)
    return workers


def answers(fd: int) -> Iterator[tuple[int, object]]:
    """The (index, result) pairs a worker of fork_workers sent, until its pipe ends (closing it)."""
    import pickle

    with open(fd, "rb") as pipe:
        while True:
            head = pipe.read(4)
            if len(head) < 4:
                return
            size = int.from_bytes(head, "little")
            data = pipe.read(size)
            if len(data) < size:
                return  # the worker died while it wrote: its name is run again
            yield pickle.loads(data)


def table(head: list[str], rows: list[list[str]]) -> None:
    """Aligned columns; the last column is free text."""
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head) - 1)]
    for row in [head, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
