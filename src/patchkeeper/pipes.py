"""A stdout whose reader may leave (`patchkeeper log --json | head -1`): the output just ends, as git's does."""

from __future__ import annotations

import os
import select
import sys
from typing import Any, TextIO


class ReaderGone:
    """sys.stdout that, once the reader has closed the pipe (`| head`), sends the rest to /dev/null.

    Like git, the output simply stops: no "Broken pipe" error, and the command still runs to its
    end, so a change it made is mirrored and verified and its exit code keeps its meaning."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.gone = False
        self.wrote = False  # anything written: a --json verb that wrote its document before an error

    def write(self, text: str) -> int:
        self.wrote = self.wrote or bool(text)
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

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def stdout_gone() -> bool:
    """Whether stdout's reader has left; if so, whatever is still buffered goes to /dev/null."""

    out = sys.stdout
    if isinstance(out, ReaderGone):
        out.flush()
        if out.gone:
            return True
    try:
        poll = select.poll()
        poll.register(sys.__stdout__.fileno() if sys.__stdout__ else 1, select.POLLOUT)
        gone = any(events & select.POLLERR for _, events in poll.poll(0))  # a pipe without a reader
    except (AttributeError, OSError, ValueError):
        return False
    if gone and isinstance(out, ReaderGone):
        out._to_devnull()
    return gone


def quiet_when_reader_leaves() -> None:
    if not isinstance(sys.stdout, ReaderGone):
        try:
            sys.stdout.fileno()
        except (AttributeError, OSError, ValueError):  # not a real file (a test runner's capture)
            return
        sys.stdout = ReaderGone(sys.stdout)
