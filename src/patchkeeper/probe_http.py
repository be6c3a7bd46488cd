"""HTTP checks run by the target's own Python (stdlib only): wait for readiness, then one generation.

patchkeeper sends this file's source to `python -I -c` on the target with a JSON request on stdin,
so the server is reached as the target sees it (a loopback-only server on a remote host included).
It prints one JSON document. Request keys: base_url, window (seconds to poll for readiness),
interval, and generate (null, or prompt, max_tokens, timeout, endpoint, model).
"""

import json
import socket
import sys
import time
import urllib.error
import urllib.request

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through a proxy
TEXT_KEEP = 4000


def _call(url, body=None, timeout=5.0):
    """(status, parsed JSON or None, error text or None); status 0 when no HTTP answer came."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            raw = resp.read()
            status = resp.status
    except urllib.error.HTTPError as exc:
        return exc.code, None, f"HTTP {exc.code} {exc.reason}"
    except (socket.timeout, TimeoutError):
        return 0, None, f"no answer within {timeout:g}s"
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, (socket.timeout, TimeoutError)):
            return 0, None, f"no answer within {timeout:g}s"
        return 0, None, str(getattr(reason, "strerror", None) or reason)
    except (OSError, ValueError) as exc:
        return 0, None, str(exc)
    try:
        return status, json.loads(raw), None
    except ValueError:
        return status, None, f"HTTP {status} but the body is not JSON: {raw[:120]!r}"


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


def generate(base, models, g):
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
    if result["ready"] and req.get("generate"):
        result["generate"] = generate(base, result.get("models") or [], req["generate"])
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
