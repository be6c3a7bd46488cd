"""The MCP server's stdio wire: one JSON-RPC message a line, read in chunks, each line answered.

It stands in for the SDK's `mcp.server.stdio.stdio_server` (mcp 2.3), which has two gaps:
- a line that is not JSON, or not a JSON-RPC message, gets no answer: its reader hands the
  validation error to the dispatcher, which logs it at debug level and drops it. JSON-RPC 2.0 says
  a line that is not JSON is answered -32700 Parse error, a valid JSON that is not a valid message
  -32600 Invalid Request, with `"id": null` when its id cannot be read;
- a line is read whole (`async for line in stdin`), however long: a 200 MB line cost 800 MB.
Here fd 0 is read in chunks of CHUNK bytes, a line over MAX_MESSAGE is dropped as it comes (never
held whole) and answered -32600 naming the limit, and every other line that is not a message is
answered as JSON-RPC says; the connection then goes on to the next line. As the SDK's transport
does, fd 0 and fd 1 point at /dev/null and stderr while serving (a verb's child reads EOF, its stray
output misses the wire) and are put back at the end.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final

from ..printable import one_line

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
    from mcp.shared.message import SessionMessage

# The longest message read. A request patchkeeper serves is a few hundred bytes (a tool call's
# arguments are at most MAX_TARGETS names of MAX_TEXT characters: about 200 KB), and a client's
# answer to it (a ping) is smaller still: 16 MiB is far above any real one, and a longer line costs
# no more memory than this (it is dropped chunk by chunk as it comes).
MAX_MESSAGE: Final = 16 * 1024 * 1024
CHUNK: Final = 64 * 1024  # bytes read from stdin at a time
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
TOO_LONG: Final = None  # Lines.feed's mark of a line over the limit, once, when it goes over


class Lines:
    """Bytes into lines (without their newline) of at most `limit` bytes; the bytes of a longer line
    are dropped as they come, and TOO_LONG stands for it once."""

    def __init__(self, limit: int = MAX_MESSAGE) -> None:
        self.limit = limit
        self._part = bytearray()
        self._dropping = False

    def feed(self, chunk: bytes) -> list[bytes | None]:
        out: list[bytes | None] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = memoryview(chunk)[start : len(chunk) if end < 0 else end]
            if not self._dropping:
                if len(self._part) + len(piece) > self.limit:
                    self._part = bytearray()  # freed now, not when the line ends
                    self._dropping = True
                    out.append(TOO_LONG)
                else:
                    self._part += piece
            if end < 0:
                return out
            if not self._dropping:
                out.append(bytes(self._part))
            self._part = bytearray()
            self._dropping = False
            start = end + 1

    def finish(self) -> list[bytes | None]:
        """The last line, when the input ended without a newline."""
        last: list[bytes | None] = [] if self._dropping or not self._part else [bytes(self._part)]
        self._part = bytearray()
        return last


def judge(line: bytes) -> Any:
    """A line: the JSON-RPC message it holds, or the error answering it (a JSONRPCError), or None
    for a blank line (framing, not a message: no answer)."""
    import mcp_types as types  # lazy: the extra [mcp]

    try:  # the SDK's reader decoded with replacement characters: a name's byte became U+FFFD
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return error(
            None,
            PARSE_ERROR,
            f"Parse error: the line is not UTF-8 (byte {line[exc.start]:#04x} at offset {exc.start}); "
            "JSON between systems is UTF-8 (RFC 8259)",
        )
    if not text.strip():
        return None
    try:
        message = types.jsonrpc_message_adapter.validate_json(text, by_name=False)
    except ValueError as exc:  # the models' ValidationError is one
        why = _why(exc)
    else:
        if not isinstance(message, types.JSONRPCNotification) or not _names_an_id(text):
            return message
        # the SDK's models take a request whose id is no id (null, true, 1.5, an object) for a
        # notification, which gets no answer: its client would wait for one forever
        why = "id: a string or an integer"
    try:
        doc = json.loads(text)
    except ValueError as exc:
        return error(None, PARSE_ERROR, f"Parse error: the line is not JSON ({str(exc)[:200]})")
    except RecursionError:
        return error(None, INVALID_REQUEST, "Invalid Request: JSON nested too deep")
    return error(
        _request_id(doc), INVALID_REQUEST, f"Invalid Request: not a JSON-RPC 2.0 message ({why[:200]})"
    )


def _why(exc: ValueError) -> str:
    """The first problem the SDK's models found, short: where and what."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return str(exc)
    problem = errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part) for part in problem["loc"])[:100]
    return f"{where}: {problem['msg']}" if where else str(problem["msg"])


def error(request: int | str | None, code: int, message: str) -> Any:
    import mcp_types as types  # lazy: the extra [mcp]

    return types.JSONRPCError(jsonrpc="2.0", id=request, error=types.ErrorData(code=code, message=message))


def too_long() -> Any:
    return error(
        None,
        INVALID_REQUEST,
        f"Invalid Request: a line over {MAX_MESSAGE} bytes ({MAX_MESSAGE // 2**20} MiB), the longest message "
        "patchkeeper mcp reads; it was dropped",
    )


def _request_id(doc: Any) -> int | str | None:
    """The id of what was meant as a request (it names a method), when it is one JSON-RPC allows."""
    if isinstance(doc, dict) and "method" in doc:
        found = doc.get("id")
        if isinstance(found, (int, str)) and not isinstance(found, bool):
            return found
    return None


def _names_an_id(text: str) -> bool:
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):  # what the SDK's parser reads and json does not: no id seen
        return False
    return isinstance(doc, dict) and "id" in doc


def _claim(fd: int, diversion: int) -> int:
    """A private duplicate of `fd` (the wire), and `fd` pointed at `diversion`."""
    private = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.dup2(diversion, fd)
    return private


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


@asynccontextmanager
async def stdio() -> AsyncIterator[
    tuple[MemoryObjectReceiveStream[SessionMessage | Exception], MemoryObjectSendStream[SessionMessage]]
]:
    """The streams `Server.run` serves, over the process's stdin and stdout."""
    import anyio  # lazy: the extra [mcp]
    import anyio.to_thread  # lazy: the extra [mcp]
    import mcp_types as types  # lazy: the extra [mcp]
    from mcp.shared.message import SessionMessage  # lazy: the extra [mcp]

    sys.stdout.flush()
    null = os.open(os.devnull, os.O_RDONLY)
    wire_in = _claim(0, null)  # never closed: a reading thread may still block on it at the end
    os.close(null)
    wire_out = _claim(1, 2)
    to_server, from_client = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    to_client, from_server = anyio.create_memory_object_stream[SessionMessage](0)
    answers = to_client.clone()  # the reader's own, for the lines it answers itself

    async def read() -> None:
        lines = Lines()
        async with to_server, answers:
            while True:
                try:
                    chunk = await anyio.to_thread.run_sync(os.read, wire_in, CHUNK, abandon_on_cancel=True)
                except OSError:  # stdin broke: as its end
                    chunk = b""
                for line in lines.feed(chunk) if chunk else lines.finish():
                    item = too_long() if line is TOO_LONG else judge(line)
                    if isinstance(item, types.JSONRPCError):
                        print(
                            f"patchkeeper mcp: answered {one_line(item.error.message[:300])}", file=sys.stderr
                        )
                        await answers.send(SessionMessage(item))
                    elif item is not None:
                        await to_server.send(SessionMessage(item))
                if not chunk:
                    return

    async def write() -> None:
        gone = False  # the client closed its end: what is left to send is dropped, the server ends as usual
        async with from_server:
            async for message in from_server:
                text = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                try:
                    if not gone:
                        await anyio.to_thread.run_sync(_write_all, wire_out, text.encode() + b"\n")
                except OSError:
                    gone = True

    try:
        async with anyio.create_task_group() as tasks:
            reading = anyio.CancelScope()

            async def read_until_done() -> None:
                with reading:
                    await read()

            tasks.start_soon(write)
            tasks.start_soon(read_until_done)
            try:
                yield from_client, to_client
            finally:
                reading.cancel()  # the server is done: stop reading (and let go of the answers' stream)
                await to_client.aclose()
    finally:
        os.dup2(wire_out, 1)
        os.close(wire_out)
        os.dup2(wire_in, 0)
