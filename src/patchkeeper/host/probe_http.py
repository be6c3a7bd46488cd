"""HTTP checks run by the target's own Python (stdlib only): wait for readiness, generate, ask /server_info.

patchkeeper sends this file's source to `python -I -c` on the target with a JSON request on stdin,
so the server is reached as the target sees it (a loopback-only server on a remote host included).
It prints one JSON document. Request keys: base_url, window (seconds to poll for readiness),
interval, generate (null, or prompt, max_tokens, timeout, endpoint, model, warmup, requests,
concurrency) and listener_port (null, or the port whose listening process's command line is wanted,
found through /proc). After the generations it asks /server_info (sglang's resolved server
arguments and internal states; /get_server_info where that is 404) for what speculation runs.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from typing import Any

TEXT_KEEP = 4000
# http.client, not urllib.request: ~0.1 s less of imports on every run, and it never goes through
# a proxy, which a check of the target's own loopback must not.


def split_url(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, path) of an http:// or https:// URL (a bracketed IPv6 host without its brackets)."""
    scheme, _, rest = url.partition("://")
    hostport, _, path = rest.partition("/")
    host, port = hostport, 443 if scheme == "https" else 80
    if hostport.startswith("["):
        host, _, tail = hostport[1:].partition("]")
        port = int(tail[1:]) if tail.startswith(":") else port
    elif ":" in hostport:
        host, _, p = hostport.rpartition(":")
        port = int(p)
    return scheme, host, port, "/" + path


def _exchange(url: str, body: Any, timeout: float) -> tuple[int, str, bytes]:
    """(status, reason, payload) of one request, the whole answer read within `timeout` seconds."""
    import http.client  # lazy: http (with email) is slow to import; only probes need it

    scheme, host, port, path = split_url(url)
    deadline = time.monotonic() + timeout
    kind = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
    conn = kind(host, port, timeout=timeout)
    try:
        headers = {"Accept": "application/json", "Connection": "close"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        conn.request("GET" if body is None else "POST", path, body=data, headers=headers)
        sock = conn.sock  # kept: the connection lets go of it once the answer says it closes

        def left() -> None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise socket.timeout("deadline")
            sock.settimeout(remaining)

        left()
        resp = conn.getresponse()
        chunks: list[bytes] = []
        while True:
            left()
            chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(65536)
            if not chunk:
                return resp.status, resp.reason, b"".join(chunks)
            chunks.append(chunk)
    finally:
        conn.close()


def _call(url: str, body: Any = None, timeout: float = 5.0) -> tuple[int, Any, str | None]:
    """(status, parsed JSON or None, error text or None); status 0 when no HTTP answer came."""
    import http.client  # lazy: http (with email) is slow to import; only probes need it

    try:
        status, reason, payload = _exchange(url, body, timeout)
    except (socket.timeout, TimeoutError):
        return 0, None, f"no answer within {timeout:g}s"
    except http.client.IncompleteRead as exc:
        return 0, None, f"a truncated answer: {exc}"
    except http.client.HTTPException as exc:
        return 0, None, f"not an HTTP answer: {exc}"
    except (OSError, ValueError) as exc:
        return 0, None, getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    if status != 200:
        return status, None, f"HTTP {status} {reason or ''}".strip()
    try:
        return status, json.loads(payload), None
    except ValueError:
        return status, None, f"HTTP {status} but the body is not JSON: {payload[:120]!r}"


def ready(base: str, window: float, interval: float) -> dict[str, Any]:
    """Poll /v1/models (then /health where that is 404) until one answers 200 or the window ends."""
    start = time.monotonic()
    last = "not tried"
    while True:
        status, doc, err = _call(base + "/v1/models", timeout=max(1.0, min(5.0, window)))
        if status == 200:
            models = [m.get("id") for m in (doc or {}).get("data", []) if isinstance(m, dict)]
            return {"ready": True, "url": base + "/v1/models", "models": models, "detail": "HTTP 200"}
        if status == 404:
            status, _, err = _call(base + "/health", timeout=max(1.0, min(5.0, window)))
            if status == 200:
                return {"ready": True, "url": base + "/health", "models": [], "detail": "HTTP 200"}
        last = err or f"HTTP {status}"
        if time.monotonic() - start + interval > window:
            return {"ready": False, "detail": last}
        time.sleep(interval)


def listener(port: int) -> dict[str, Any]:
    """The processes holding the socket listening on `port` (Linux /proc): pid and argv of each, or why not."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and cols[3] == "0A" and int(cols[1].rpartition(":")[2], 16) == port:
                inodes.add(f"socket:[{cols[9]}]")
    if not inodes:
        return {"error": f"no socket listening on port {port} in /proc/net/tcp or /proc/net/tcp6"}
    found: list[dict[str, Any]] = []
    unreadable = 0
    for pid in _pids():
        if not pid.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            unreadable += 1
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link in inodes:
                argv: list[str] | None
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                        argv = [a.decode("utf-8", "replace") for a in cmdline.read().split(b"\0")[:-1]]
                except OSError:
                    argv = None
                found.append({"pid": int(pid), "argv": argv})
                break
    if not found:
        return {
            "error": f"no process whose open files could be read holds the socket listening on port {port} "
            f"({unreadable} process(es) could not be read: another user's?)"
        }
    return {"processes": sorted(found, key=lambda p: int(p["pid"]))}


def _pids() -> list[str]:
    try:
        return os.listdir("/proc")
    except OSError:
        return []


def generate(base: str, models: list[str], g: dict[str, Any]) -> dict[str, Any]:
    """The warm-up completions, then `requests` judged ones one after the other (ending at the first
    that fails to answer), then `concurrency` at once: each one's text, token count and seconds."""

    warmups = []
    for _ in range(int(g.get("warmup") or 0)):
        w = _complete(base, models, g)
        warmups.append({"seconds": w["seconds"], "error": w.get("error")})
    sequential: list[dict[str, Any]] = []
    for _ in range(max(1, int(g.get("requests") or 1))):
        sequential.append(_complete(base, models, g))
        if sequential[-1].get("error"):
            break
    concurrent: list[dict[str, Any]] = []
    count = int(g.get("concurrency") or 0)
    if count and not sequential[-1].get("error"):
        concurrent = [{} for _ in range(count)]

        def one(i: int) -> None:
            concurrent[i] = _complete(base, models, g)

        threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(count)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(float(g["timeout"]) + 10)
        concurrent = [
            c or {"error": "the request did not end", "timed_out": True, "seconds": float(g["timeout"])}
            for c in concurrent
        ]
    return {
        "model": sequential[0].get("model"),
        "sequential": sequential,
        "concurrent": concurrent,
        "warmups": warmups,
    }


def server_info(base: str) -> dict[str, Any]:
    """What /server_info says about speculation: the algorithm (when the key is there at all), each
    internal state's average accept length, and the launch command; or why it could not be asked."""
    url = base + "/server_info"
    status, doc, err = _call(url, timeout=10.0)
    if status == 404:
        url = base + "/get_server_info"
        status, doc, err = _call(url, timeout=10.0)
    if err is not None or not isinstance(doc, dict):
        return {"url": url, "error": err or "the answer is not a JSON object"}
    states = doc.get("internal_states")
    lengths = (
        [s.get("avg_spec_accept_length") for s in states if isinstance(s, dict)]
        if isinstance(states, list)
        else []
    )
    out: dict[str, Any] = {
        "url": url,
        "accept_lengths": [x for x in lengths if isinstance(x, (int, float))],
        "launch_command": doc.get("launch_command"),
        "version": doc.get("version"),
    }
    if "speculative_algorithm" in doc:
        out["speculative_algorithm"] = doc["speculative_algorithm"]
    return out


def _complete(base: str, models: list[str], g: dict[str, Any]) -> dict[str, Any]:
    """One completion; the text, the token count the server reports, the seconds it took."""
    model = g.get("model") or (models[0] if models else "default")
    endpoint = g.get("endpoint") or "completions"
    out: dict[str, Any] = {"model": model}
    for attempt in ("completions", "chat") if endpoint == "completions" else ("chat",):
        if attempt == "completions":
            url = base + "/v1/completions"
            body = {"model": model, "prompt": g["prompt"], "max_tokens": g["max_tokens"], "temperature": 0}
        else:
            url = base + "/v1/chat/completions"
            body = {
                "model": model,
                "messages": [{"role": "user", "content": g["prompt"]}],
                "max_tokens": g["max_tokens"],
                "temperature": 0,
            }
        start = time.monotonic()
        status, doc, err = _call(url, body, timeout=g["timeout"])
        out.update(url=url, status=status, seconds=time.monotonic() - start, error=err)
        if status == 404 and attempt == "completions" and endpoint == "completions":
            continue
        break
    if err is None and status == 200:
        try:
            choice = doc["choices"][0]
            if "text" in choice:
                text = choice.get("text") or ""
            else:
                msg = choice.get("message") or {}
                text = (msg.get("reasoning_content") or "") + (msg.get("content") or "")
            usage = doc.get("usage") or {}
            out.update(
                text=text[:TEXT_KEEP],
                chars=len(text),
                finish_reason=choice.get("finish_reason"),
                completion_tokens=usage.get("completion_tokens"),
            )
        except (KeyError, IndexError, TypeError, AttributeError):
            out["error"] = "the answer is not an OpenAI-style completion: " + json.dumps(doc)[:200]
    elif err is None:
        out["error"] = f"HTTP {status}"
    out["timed_out"] = status == 0 and out["error"].startswith("no answer within")
    return out


def main() -> None:
    req = json.load(sys.stdin)
    base = req["base_url"].rstrip("/")
    start = time.monotonic()
    result = ready(base, float(req.get("window", 5.0)), float(req.get("interval", 0.2)))
    result["seconds"] = time.monotonic() - start
    if result["ready"] and req.get("listener_port"):
        result["listener"] = listener(int(req["listener_port"]))
    if result["ready"] and req.get("generate"):
        result["generate"] = generate(base, result.get("models") or [], req["generate"])
        result["server_info"] = server_info(base)
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
