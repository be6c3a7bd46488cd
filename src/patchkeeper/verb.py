"""Running one verb: every PatchkeeperError to its exit code, and a stdout whose reader may leave.

Shared by cli.py and the click-free fast path (launch.py), so both end a verb alike."""

from __future__ import annotations

import os
import sys
from typing import Any, Callable, NoReturn

from .errors import EXIT_INTERRUPTED, PatchkeeperError


def _say(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def run_verb(fn: Callable[..., int], *args: Any, **kwargs: Any) -> NoReturn:
    """Call a verb and exit with its code; an error becomes one line on stderr and its exit code."""
    _quiet_when_reader_leaves()
    try:
        code = fn(*args, **kwargs)
    except PatchkeeperError as exc:
        _say(f"patchkeeper: error: {exc}")
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        if not _stdout_gone():
            raise  # another pipe (a host's channel...): a real error, reported below
        sys.exit(141)  # as git does when its reader leaves in the middle of raw bytes: 128 + SIGPIPE
    except OSError as exc:  # the file system said no (permissions, a full disk): one line, not a traceback
        where = f": {exc.filename}" if exc.filename else ""
        _say(f"patchkeeper: error: {exc.strerror or exc}{where}\n  hint: fix that, then run the command "
             "again; an interrupted change is finished or undone by the next command")
        sys.exit(2)
    except KeyboardInterrupt:  # Ctrl-C: its own code, not 1 ("differences found")
        _say("\npatchkeeper: error: interrupted (Ctrl-C)\n  hint: a change that was under way is finished or undone by "
             "`patchkeeper recover` (or by the next command on the target)")
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(code)


def leave(code: int) -> NoReturn:
    """Exit with `code` as sys.exit does, but without the interpreter's teardown, which frees every
    object one by one and collects once more (after a cold audit of sglang: about 12 ms; after a
    rollback, whose stat caches and manifests are still held: 40-60 ms), to give back memory that
    the exit gives back whole: the exit handlers run and stdout and stderr are flushed first. While
    another thread runs, under a profiler or tracer, or when a flush fails, sys.exit's own way.
    launch.main ends every command so."""
    import atexit

    threading = sys.modules.get("threading")
    if threading is not None and threading.active_count() > 1:  # sys.exit waits for it
        sys.exit(code)
    if sys.getprofile() is not None or sys.gettrace() is not None:  # a profiler or debugger that reports
        sys.exit(code)  # once the program returns (python -m cProfile): sys.exit lets it
    atexit._run_exitfuncs()
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):  # as the teardown would say it (and exit 120)
        sys.exit(code)
    os._exit(code)


class _ReaderGone:
    """sys.stdout that, once the reader has closed the pipe (`| head`), sends the rest to /dev/null.

    Like git, the output simply stops: no "Broken pipe" error, and the command still runs to its
    end, so a change it made is mirrored and verified and its exit code keeps its meaning."""

    def __init__(self, stream) -> None:
        self._stream = stream
        self.gone = False

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._to_devnull()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._to_devnull()

    def _to_devnull(self) -> None:
        self.gone = True
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, self._stream.fileno())  # the buffered rest (and the flush at exit) goes nowhere
        os.close(null)
        try:
            self._stream.flush()
        except BrokenPipeError:  # a part of the buffer the failed write kept: now it goes nowhere
            self._stream.flush()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _stdout_gone() -> bool:
    """Whether stdout's reader has left; if so, whatever is still buffered goes to /dev/null."""
    import select

    out = sys.stdout
    if isinstance(out, _ReaderGone):
        out.flush()
        if out.gone:
            return True
    try:
        poll = select.poll()
        poll.register(sys.__stdout__.fileno() if sys.__stdout__ else 1, select.POLLOUT)
        gone = any(events & select.POLLERR for _, events in poll.poll(0))  # a pipe without a reader
    except (AttributeError, OSError, ValueError):
        return False
    if gone and isinstance(out, _ReaderGone):
        out._to_devnull()
    return gone


def _quiet_when_reader_leaves() -> None:
    if not isinstance(sys.stdout, _ReaderGone):
        try:
            sys.stdout.fileno()
        except (AttributeError, OSError, ValueError):  # not a real file (a test runner's capture)
            return
        sys.stdout = _ReaderGone(sys.stdout)
