"""`patchkeeper mcp`'s wire, bytes on its stdin: every line that is not a JSON-RPC message is answered
as JSON-RPC 2.0 says, a line over the limit is answered and dropped without being held whole, and the
connection serves the next request; a tool call that names a target twice is refused."""

from __future__ import annotations

import json

from hypothesis import given, settings, strategies as st
from mcpclient import Agent, Wire, serve

from patchkeeper.mcpserver.wire import MAX_MESSAGE, TOO_LONG, Lines

PING = b'{"jsonrpc": "2.0", "id": "after", "method": "ping"}\n'
REQUEST = b'{"jsonrpc": "2.0", "id": 99, "method": "tools/call", "params": {"name": "list", "arguments": {}}}'

NOT_JSON = [
    b"not json",
    b"{'jsonrpc': '2.0'}",
    b'{"jsonrpc": "2.0", "id": 1, "method": "ping",}',
    b"NaN-ish: }{",
    *(REQUEST[:cut] for cut in range(1, len(REQUEST))),  # every cut of a request: a client died mid-line
]
NOT_A_REQUEST = [  # (line, the id the answer carries)
    (b"[]", None),
    (b'[{"jsonrpc": "2.0", "id": 3, "method": "ping"}]', None),  # a batch: MCP has none
    (b"42", None),
    (b'"ping"', None),
    (b"null", None),
    (b"{}", None),
    (b'{"jsonrpc": "2.0", "method": 1, "params": "bar"}', None),
    (b'{"jsonrpc": "2.0", "id": true, "method": "ping"}', None),  # the SDK's models: a notification
    (b'{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}', None),
    (b'{"jsonrpc": "2.0", "id": null, "method": "ping"}', None),
    (b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}', None),
    (b'{"jsonrpc": "2.0", "id": 8}', None),
    (b'{"jsonrpc": "1.0", "id": 7, "method": "ping"}', 7),
    (b'{"id": "x", "method": "ping"}', "x"),
    (b'{"jsonrpc": "2.0", "id": 9, "method": "ping", "params": [1, 2]}', 9),
    (b"[" * 100_000 + b"]" * 100_000, None),
]


NOT_UTF8 = [  # JSON in form, but bytes that are not UTF-8: decoded with U+FFFD, they were served
    b"\xff\xfe\x00garbage",
    b'{"jsonrpc": "2.0", "id": 5, "method": "ping", "params": {"x": "\xff"}}',
    b'{"jsonrpc": "2.0", "id": 5, "method": "ping", "params": {"x": "\xc0\xaf"}}',  # an overlong "/"
    b'{"jsonrpc": "2.0", "id": 5, "method": "ping", "params": {"x": "\xed\xa0\x80"}}',  # a surrogate
    b'{"jsonrpc": "2.0", "id": 5, "method": "ping", "params": {"x": "\xe2\x82"}}',  # cut short
    b'{"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "status", '
    b'"arguments": {"targets": ["loc\xe9al"]}}}',  # Latin-1
]


def _error(answer: dict[str, object], code: int, request: object) -> str:
    assert set(answer) == {"jsonrpc", "id", "error"} and answer["jsonrpc"] == "2.0", answer
    assert answer["id"] == request, answer
    error = answer["error"]
    assert isinstance(error, dict) and error["code"] == code, answer
    return str(error["message"])


def test_a_line_that_is_not_a_json_rpc_message_is_answered_and_the_next_request_served(env, tmp_path):
    """The gap in the SDK's stdio_server (mcp 2.3): its reader hands such a line's validation error to
    the dispatcher, which logs it at debug level and drops it; the client never hears of it."""
    log = tmp_path / "server.log"
    wire = Wire(env.root, errlog=log)
    for line in NOT_JSON:
        wire.send(line + b"\n" + PING)  # the bad line and a request after it, at once
        assert _error(wire.answer(), -32700, None).startswith("Parse error: the line is not JSON"), line
        assert wire.answer() == {"jsonrpc": "2.0", "id": "after", "result": {}}
    for line in NOT_UTF8:
        wire.send(line + b"\n" + PING)
        message = _error(wire.answer(), -32700, None)
        assert message.startswith("Parse error: the line is not UTF-8 (byte 0x"), (line, message)
        first = next(i for i, byte in enumerate(line) if byte >= 0x80)  # each line's one bad sequence
        assert f"(byte {line[first]:#04x} at offset {first})" in message, message
        assert wire.answer() == {"jsonrpc": "2.0", "id": "after", "result": {}}
    for line, request in NOT_A_REQUEST:
        wire.send(line + b"\n" + PING)
        message = _error(wire.answer(), -32600, request)
        assert message.startswith("Invalid Request"), (line[:80], message)
        assert wire.answer()["id"] == "after"
    wire.send(b"\n  \r\n" + PING)  # blank lines are framing, not messages: no answer
    assert wire.answer()["id"] == "after"
    listed = wire.request("tools/call", {"name": "list", "arguments": {}})  # the session goes on whole
    assert json.loads(listed["result"]["content"][0]["text"]) == json.loads(env.pk("list", "--json").stdout)
    assert wire.close() == 0
    assert "patchkeeper mcp: answered Parse error" in log.read_text()


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"")), max_size=12),
    cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=20),
    end_with_newline=st.booleans(),
)
def test_lines_split_a_stream_however_it_is_cut(lines, cuts, end_with_newline):
    """Lines gives each line of at most `limit` bytes, and TOO_LONG once for each longer one, whatever
    the chunks the stream comes in (a newline at a chunk's edge, a line exactly at the limit)."""
    limit = 5
    stream = b"\n".join(lines) + (b"\n" if end_with_newline else b"")
    expected = [line if len(line) <= limit else TOO_LONG for line in stream.split(b"\n")]
    if expected and expected[-1] == b"":  # the end of the stream is no line
        expected.pop()
    edges = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    splitter, got = Lines(limit), []
    for start, end in zip(edges, edges[1:]):
        got += splitter.feed(stream[start:end])
    got += splitter.finish()
    assert got == expected


def _ping(request: object, size: int) -> bytes:
    """A valid ping of exactly `size` bytes (its newline aside): served, were its size no matter."""
    head = (
        b'{"jsonrpc": "2.0", "id": '
        + json.dumps(request).encode()
        + b', "method": "ping", "params": {"_meta": {"pad": "'
    )
    tail = b'"}}}'
    line = head + b"x" * (size - len(head) - len(tail)) + tail
    assert len(line) == size and json.loads(line)["id"] == request
    return line + b"\n"


def test_a_line_over_the_limit_is_answered_and_dropped_as_it_comes(env, tmp_path):
    """The gap in the SDK's stdio_server (mcp 2.3): it reads a line whole (`async for line in stdin`),
    however long: a 200 MB line cost the server 800 MB. patchkeeper's wire holds at most MAX_MESSAGE."""
    wire = Wire(env.root, errlog=tmp_path / "server.log")
    wire.send(_ping("at the limit", MAX_MESSAGE))  # the longest line read is served
    assert wire.answer() == {"jsonrpc": "2.0", "id": "at the limit", "result": {}}

    wire.send(_ping("over", MAX_MESSAGE + 1) + PING)
    message = _error(wire.answer(), -32600, None)  # its id is never read: the line is not kept
    assert f"a line over {MAX_MESSAGE} bytes (16 MiB)" in message and "dropped" in message
    assert wire.answer()["id"] == "after"

    size = 8 * MAX_MESSAGE  # 128 MiB
    before = wire.peak_memory()
    wire.send(_ping("huge", size) + PING)
    assert "a line over" in _error(wire.answer(), -32600, None)
    assert wire.answer()["id"] == "after"
    grew = wire.peak_memory() - before
    assert grew < size // 4, f"the server's peak memory grew {grew >> 20} MiB reading a {size >> 20} MiB line"
    assert wire.request("tools/list")["result"]["tools"]
    assert wire.close() == 0


TAKE_TARGETS = [  # every tool that takes targets, with its other arguments
    ("status", {}),
    ("audit", {}),
    ("log", {}),
    ("diff", {}),
    ("verify", {}),
    ("check", {"name": "ddtree"}),
    ("plan", {"action": "apply", "name": "ddtree"}),
    ("plan", {"action": "rollback", "to": "baseline"}),
]


def test_a_target_named_twice_is_refused_before_anything_runs(env, tmp_path):
    """Today `targets: ["local", "local"]` ran a rollout of one target as if of two."""
    before = env.snapshot()

    async def body(agent: Agent) -> None:
        tools = {t.name: t for t in (await agent.session.list_tools()).tools}
        assert {name for name, t in tools.items() if "targets" in t.input_schema["properties"]} == {
            tool for tool, _ in TAKE_TARGETS
        }
        for tool, args in TAKE_TARGETS:
            assert tools[tool].input_schema["properties"]["targets"]["uniqueItems"] is True
            doc = await agent.refused(tool, targets=["local", "local"], **args)
            assert doc["message"] == f"{tool}: targets names 'local' twice", doc
            assert doc["hint"] == "name each of the targets once"
            doc = await agent.refused(tool, targets=["local", "nosuch", "local"], **args)  # before any lookup
            assert "names 'local' twice" in doc["message"], doc
        assert tools["diff"].input_schema["properties"]["sides"]["uniqueItems"] is True
        doc = await agent.refused("diff", sides=["local", "local"])  # itself: nothing to compare
        assert doc["message"] == "diff: sides names 'local' twice", doc
        assert not agent.progress  # no verb ran: nothing planned, nothing previewed

    serve(env.root, body, errlog=tmp_path / "server.log")
    assert env.snapshot() == before and not env.state_dir.exists()
