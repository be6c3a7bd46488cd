"""A small OpenAI-compatible stand-in for an inference server, started and stopped by a restart command.

    python fake_openai.py start --state UNIT [--state DROPIN ...] --port N --pidfile P --log L [--when TEXT=MODE ...]
    python fake_openai.py stop --pidfile P --port N

`start` stops the previous server (pidfile), then launches a detached one. The server reads the
state files (the target's unit file and its drop-in; one absent is skipped) once when it starts, the
way a real service reads its code, and takes the mode of the first `--when TEXT=MODE` whose TEXT they
contain (else `--default`):
    healthy     answers /v1/models and completions at once with varied text
    slow-load   answers 503 on /v1/models for --load-seconds, then healthy
    hang        answers /v1/models, but completions never come back (within --hang-seconds)
    degenerate  answers completions at once with "!!!!!!!!…"
    flaky       answers the first completion with good text, every later one with "!!!!…"
    other-text  answers completions with good text, but not the text `healthy` gives (other greedy output)
    slow        answers completions with good text after --slow-seconds
    fail-start  `start` itself fails (exit 1), as a broken unit would
It has no /server_info (404): what runs is not said. Stdlib only.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODES = ("healthy", "slow-load", "hang", "degenerate", "flaky", "other-text", "slow", "fail-start")
MODEL = "qwen3-8b"
TEXT = (
    'def fibonacci(n: int) -> int:\n    """Return the n-th Fibonacci number, starting from F(0) = 0."""\n'
    '    if n < 0:\n        raise ValueError("n must not be negative")\n    a, b = 0, 1\n'
    "    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n\nprint([fibonacci(i) for i in range(10)])\n"
)
OTHER_TEXT = (
    'def fibonacci(n: int) -> int:\n    """The n-th Fibonacci number, computed recursively."""\n'
    "    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\n\n"
    "assert [fibonacci(i) for i in range(8)] == [0, 1, 1, 2, 3, 5, 8, 13]\n"
)


def words(text: str) -> list[str]:
    out, cur = [], ""
    for ch in text:
        cur += ch
        if ch.isspace() or not ch.isalnum():
            out.append(cur)
            cur = ""
    return out + ([cur] if cur else [])


class JsonHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 with keep-alive; `send` answers one JSON document (the stand-in server shares it)."""

    protocol_version = "HTTP/1.1"

    def send(self, status: int, doc: dict) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def healthy_text(max_tokens: int, text: str = TEXT) -> tuple[str, int]:
    pieces = words(text)
    chosen = [pieces[i % len(pieces)] for i in range(max_tokens)]
    return "".join(chosen), len(chosen)


def choose_mode(states: list[str], rules: list[str], default: str) -> tuple[str, str]:
    text = ""
    for state in states:
        try:
            text += open(state, encoding="utf-8", errors="replace").read()
        except FileNotFoundError:
            continue
        except OSError as exc:
            return default, f"state file unreadable ({exc})"
    for rule in rules:
        needle, _, mode = rule.rpartition("=")
        if needle in text:
            return mode, f"state contains {needle!r}"
    return default, "no rule matched"


def log(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{time.strftime('%H:%M:%S')} fake-openai[{os.getpid()}] {line}\n")


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def stop(pidfile: str, port: int) -> None:
    try:
        pid = int(open(pidfile).read().strip())
    except (OSError, ValueError):
        pid = None
    if pid:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5
    while port_open(port) and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        os.unlink(pidfile)
    except FileNotFoundError:
        pass


def start(args: argparse.Namespace, argv: list[str]) -> int:
    stop(args.pidfile, args.port)
    mode, why = choose_mode(args.state, args.when, args.default)
    if mode == "fail-start":
        log(args.log, f"start refused: mode fail-start ({why})")
        print(f"fake-openai: cannot start: the unit is broken (mode fail-start, {why})", file=sys.stderr)
        return 1
    with open(args.log, "a") as logf:
        proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "serve", *argv],
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=logf,
            start_new_session=True,
        )
    with open(args.pidfile, "w") as f:
        f.write(f"{proc.pid}\n")
    print(f"fake-openai: started pid {proc.pid} on port {args.port}")
    return 0


def serve(args: argparse.Namespace) -> int:
    mode, why = choose_mode(args.state, args.when, args.default)
    started = time.monotonic()
    answered = [0]  # completions answered so far (flaky: only the first is good)

    class Handler(JsonHandler):
        def log_message(self, fmt, *a):  # one line per request in the service log
            log(args.log, f"{self.command} {self.path} mode={mode} " + (fmt % a))

        def do_GET(self):
            if self.path not in ("/v1/models", "/health"):
                return self.send(404, {"error": "not found"})
            if mode == "slow-load" and time.monotonic() - started < args.load_seconds:
                return self.send(503, {"error": "model is loading"})
            self.send(200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})

        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            req = json.loads(self.rfile.read(length) or b"{}")
            if self.path not in ("/v1/completions", "/v1/chat/completions"):
                return self.send(404, {"error": "not found"})
            max_tokens = int(req.get("max_tokens") or 16)
            if mode == "hang":
                time.sleep(args.hang_seconds)
            if mode == "slow":
                time.sleep(args.slow_seconds)
            answered[0] += 1
            if mode == "degenerate" or (mode == "flaky" and answered[0] > 1):
                text, n = "!" * max_tokens, max_tokens
            else:
                text, n = healthy_text(max_tokens, OTHER_TEXT if mode == "other-text" else TEXT)
            if self.path == "/v1/completions":
                choice = {"index": 0, "text": text, "finish_reason": "length"}
            else:
                choice = {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "length",
                }
            self.send(
                200,
                {
                    "id": "cmpl-fake",
                    "object": "text_completion",
                    "model": MODEL,
                    "choices": [choice],
                    "usage": {"prompt_tokens": 12, "completion_tokens": n, "total_tokens": 12 + n},
                },
            )

    deadline = time.monotonic() + 5
    while True:
        try:
            server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    server.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    log(args.log, f"serving on 127.0.0.1:{args.port} mode={mode} ({why})")
    server.serve_forever()
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="fake_openai")
    p.add_argument("action", choices=("start", "stop", "serve"))
    p.add_argument("--state", action="append", default=[])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--pidfile", required=True)
    p.add_argument("--log", default="/dev/null")
    p.add_argument("--when", action="append", default=[], metavar="TEXT=MODE")
    p.add_argument("--default", default="healthy", choices=MODES)
    p.add_argument("--load-seconds", type=float, default=2.0)
    p.add_argument("--slow-seconds", type=float, default=1.0)
    p.add_argument("--hang-seconds", type=float, default=30.0)
    args = p.parse_args(argv)
    for rule in args.when:
        if rule.rpartition("=")[2] not in MODES:
            p.error(f"--when {rule}: mode must be one of {', '.join(MODES)}")
    if args.action == "stop":
        stop(args.pidfile, args.port)
        return 0
    if args.action == "start":
        return start(args, argv[1:])
    return serve(args)


if __name__ == "__main__":
    sys.exit(main())
