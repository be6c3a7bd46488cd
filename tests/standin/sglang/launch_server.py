"""A stand-in for `python -m sglang.launch_server`: an OpenAI-compatible server started from a unit's ExecStart.

It takes sglang's flags (the ones it does not know are ignored; --speculative-algo is taken for
--speculative-algorithm, as argparse does) and behaves by its --speculative-algorithm:
$STANDIN_RULES names a JSON file {"ALGORITHM": BEHAVIOUR} ("" for no algorithm), read when it starts.
A BEHAVIOUR is a mode, or a table of keys:
    mode            healthy (default) | broken: logs an OSError while "loading", 150 more lines after it,
                    then answers every completion with "!!!!…" | flaky: the first completion is good,
                    every later one "!!!!…"
    reports         the speculative_algorithm /server_info reports (default: the one asked for, NEXTN
                    resolved to EAGLE as sglang 0.5.23 does)
    accept_length   the avg_spec_accept_length /server_info reports once a completion ran (default 2.6
                    with speculation on)
    server_info     "absent": /server_info and /get_server_info answer 404
    text            "other": good text, but not the one `healthy` gives (other greedy output)
$STANDIN_DELAY_FILE, when set, holds the seconds each completion waits (read per request, so a test
can slow a running server down). Stdlib only; logs go to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from http.server import ThreadingHTTPServer

from fake_openai import OTHER_TEXT, TEXT, JsonHandler, healthy_text


def behaviour(algorithm: str | None) -> dict:
    rules = json.load(open(os.environ["STANDIN_RULES"])) if os.environ.get("STANDIN_RULES") else {}
    rule = rules.get(algorithm or "", "healthy")
    return {"mode": rule} if isinstance(rule, str) else dict(rule)


def main() -> int:
    p = argparse.ArgumentParser(prog="sglang.launch_server")
    p.add_argument("--model-path", required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--speculative-algorithm")
    args, _ = p.parse_known_args()
    asked = args.speculative_algorithm
    rule = behaviour(asked)
    mode = rule.get("mode", "healthy")
    reports = rule.get("reports", "EAGLE" if asked == "NEXTN" else asked)
    accept = rule.get("accept_length", 2.6 if reports else None)
    text = OTHER_TEXT if rule.get("text") == "other" else TEXT
    model = os.path.basename(args.model_path.rstrip("/")).lower()
    answered = [0]
    print(f"INFO server_args: model_path={args.model_path} speculative_algorithm={asked}")
    print(
        f"INFO environment: CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')} "
        f"NCCL_P2P_DISABLE={os.environ.get('NCCL_P2P_DISABLE')} cwd={os.getcwd()}"
    )
    if mode == "broken":
        print("Traceback (most recent call last):")
        print(
            '  File "/root/ml-env/lib/python3.11/site-packages/sglang/srt/speculative/ddtree_worker.py", line 12'
        )
        print("OSError: libddtree_kernels.so: cannot open shared object file: No such file or directory")
        print("WARNING falling back to the reference draft-tree kernels")
    for i in range(150 if mode == "broken" else 3):
        print(f"INFO capture cuda graph bs={i + 1} done")

    class Handler(JsonHandler):
        def log_message(self, fmt, *a):
            print(f"INFO {self.command} {self.path} " + (fmt % a), flush=True)

        def do_GET(self):
            if self.path in ("/server_info", "/get_server_info") and rule.get("server_info") != "absent":
                states = [{"avg_spec_accept_length": accept}] if accept is not None and answered[0] else [{}]
                return self.send(
                    200,
                    {
                        "model_path": args.model_path,
                        "speculative_algorithm": reports,
                        "launch_command": " ".join(sys.argv),
                        "internal_states": states,
                        "version": "0.5.23 (stand-in)",
                    },
                )
            if self.path != "/v1/models":
                return self.send(404, {"error": "not found"})
            self.send(200, {"object": "list", "data": [{"id": model, "object": "model"}]})

        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            delay_file = os.environ.get("STANDIN_DELAY_FILE")
            if delay_file and os.path.exists(delay_file):
                time.sleep(float(open(delay_file).read()))
            answered[0] += 1
            n = int(req.get("max_tokens") or 16)
            bad = mode == "broken" or (mode == "flaky" and answered[0] > 1)
            out, n = ("!" * n, n) if bad else healthy_text(n, text)
            self.send(
                200,
                {
                    "id": "cmpl-standin",
                    "object": "text_completion",
                    "model": model,
                    "choices": [{"index": 0, "text": out, "finish_reason": "length"}],
                    "usage": {"prompt_tokens": 12, "completion_tokens": n, "total_tokens": 12 + n},
                },
            )

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    print(f"INFO Uvicorn running on http://{args.host}:{args.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
