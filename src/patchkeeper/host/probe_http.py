"""HTTP checks run by the target's own Python (stdlib only): wait for readiness, then one generation.

patchkeeper sends this file's source to `python -I -c` on the target with a JSON request on stdin,
so the server is reached as the target sees it (a loopback-only server on a remote host included).
It prints one JSON document. Request keys: base_url, window (seconds to poll for readiness),
interval, generate (null, or prompt, max_tokens, timeout, endpoint, model, warmup) and listener_port
(null, or the port whose listening process's command line is wanted, found through /proc).
"""

import json
import os
import socket
import sys
import time

TEXT_KEEP = 4000
# A plain-socket HTTP/1.1 client: urllib.request alone costs ~0.1 s of imports on every run, and this
# one never goes through a proxy, which a check of the target's own loopback must not.


def _split(url):
    scheme, _, rest = url.partition("://")
    hostport, _, path = rest.partition("/")
    host, port = hostport, 443 if scheme == "https" else 80
    if hostport.startswith("["):
        host, _, tail = hostport[1:].partition("]")
        port = int(tail[1:]) if tail.startswith(":") else port
    elif ":" in hostport:
        host, _, p = hostport.rpartition(":")
        port = int(p)
    return scheme, hostport, host, port, "/" + path


def _dechunk(payload):
    out, pos = [], 0
    while True:
        eol = payload.find(b"\r\n", pos)
        if eol < 0:
            raise ValueError("truncated chunked body")
        size = int(payload[pos:eol].split(b";")[0], 16)
        if size == 0:
            return b"".join(out)
        out.append(payload[eol + 2:eol + 2 + size])
        pos = eol + 2 + size + 2


def _exchange(url, body, timeout):
    """Send one request and read the whole answer within `timeout` seconds in total."""
    scheme, hostport, host, port, path = _split(url)
    data = b"" if body is None else json.dumps(body).encode()
    head = (f"{'GET' if body is None else 'POST'} {path} HTTP/1.1\r\nHost: {hostport}\r\n"
            "Accept: application/json\r\nConnection: close\r\n")
    if body is not None:
        head += f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
    deadline = time.monotonic() + timeout
    conn = socket.create_connection((host, port), timeout=timeout)
    try:
        if scheme == "https":
            import ssl

            conn = ssl.create_default_context().wrap_socket(conn, server_hostname=host)
        conn.sendall(head.encode("latin-1") + b"\r\n" + data)
        chunks = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout("deadline")
            conn.settimeout(left)
            chunk = conn.recv(65536)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        conn.close()


def _call(url, body=None, timeout=5.0):
    """(status, parsed JSON or None, error text or None); status 0 when no HTTP answer came."""
    try:
        raw = _exchange(url, body, timeout)
    except (socket.timeout, TimeoutError):
        return 0, None, f"no answer within {timeout:g}s"
    except (OSError, ValueError) as exc:
        return 0, None, getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    head, sep, payload = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if not sep or len(parts) < 2 or not parts[1].isdigit():
        return 0, None, f"not an HTTP answer: {raw[:120]!r}"
    status = int(parts[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    try:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            payload = _dechunk(payload)
        elif headers.get("content-length", "").isdigit():
            payload = payload[:int(headers["content-length"])]
    except ValueError as exc:
        return status, None, f"HTTP {status} with a bad body: {exc}"
    if status != 200:
        return status, None, f"HTTP {status} {parts[2] if len(parts) > 2 else ''}".strip()
    try:
        return status, json.loads(payload), None
    except ValueError:
        return status, None, f"HTTP {status} but the body is not JSON: {payload[:120]!r}"


def ready(base, window, interval):
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


def listener(port):
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
    found, unreadable = [], 0
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
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        raw = f.read()
                    argv = [a.decode("utf-8", "replace") for a in raw.split(b"\0")[:-1]]
                except OSError:
                    argv = None
                found.append({"pid": int(pid), "argv": argv})
                break
    if not found:
        return {"error": f"no process whose open files could be read holds the socket listening on port {port} "
                         f"({unreadable} process(es) could not be read: another user's?)"}
    return {"processes": sorted(found, key=lambda p: p["pid"])}


def _pids():
    try:
        return os.listdir("/proc")
    except OSError:
        return []


def generate(base, models, g):
    """The warm-up completions, then the judged one: its text, token count (as reported) and seconds."""
    warmups = []
    for _ in range(int(g.get("warmup") or 0)):
        w = _complete(base, models, g)
        warmups.append({"seconds": w["seconds"], "error": w.get("error")})
    out = _complete(base, models, g)
    if warmups:
        out["warmups"] = warmups
    return out


def _complete(base, models, g):
    """One completion; the text, the token count the server reports, the seconds it took."""
    model = g.get("model") or (models[0] if models else "default")
    endpoint = g.get("endpoint") or "completions"
    out = {"model": model}
    for attempt in ("completions", "chat") if endpoint == "completions" else ("chat",):
        if attempt == "completions":
            url = base + "/v1/completions"
            body = {"model": model, "prompt": g["prompt"], "max_tokens": g["max_tokens"], "temperature": 0}
        else:
            url = base + "/v1/chat/completions"
            body = {"model": model, "messages": [{"role": "user", "content": g["prompt"]}],
                    "max_tokens": g["max_tokens"], "temperature": 0}
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
            out.update(text=text[:TEXT_KEEP], chars=len(text), finish_reason=choice.get("finish_reason"),
                       completion_tokens=usage.get("completion_tokens"))
        except (KeyError, IndexError, TypeError, AttributeError):
            out["error"] = "the answer is not an OpenAI-style completion: " + json.dumps(doc)[:200]
    elif err is None:
        out["error"] = f"HTTP {status}"
    out["timed_out"] = status == 0 and out["error"].startswith("no answer within")
    return out


def main():
    req = json.load(sys.stdin)
    base = req["base_url"].rstrip("/")
    start = time.monotonic()
    result = ready(base, float(req.get("window", 5.0)), float(req.get("interval", 0.2)))
    result["seconds"] = time.monotonic() - start
    if result["ready"] and req.get("listener_port"):
        result["listener"] = listener(int(req["listener_port"]))
    if result["ready"] and req.get("generate"):
        result["generate"] = generate(base, result.get("models") or [], req["generate"])
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
