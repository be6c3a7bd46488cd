"""Read a target's [service] and [service.smoke] tables into frozen, validated values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import BadInput
from ..workspace import TargetConfig

ENDPOINTS = ("completions", "chat")
COMPARE_OUTPUT = ("warn", "fail", "off")


@dataclass(frozen=True)
class SmokeConfig:
    """The smoke generations: `requests` completions one after the other, then `concurrency` at once,
    each judged on count, rate and variety; the server's own account of what runs (/server_info)."""

    prompt: str = "Write a Python function that returns the n-th Fibonacci number."
    max_tokens: int = 64
    timeout: float = 120.0  # seconds for one completion request
    min_tokens: int = 16
    min_tokens_per_s: float = 5.0
    endpoint: str = "completions"  # completions | chat (/v1/completions falls back to chat on 404)
    model: str | None = None  # default: the first model /v1/models lists
    warmup: int = 0  # completions sent (and not judged) before the judged one
    max_slowdown: float = 3.0  # slower than this times the last pass of the same code state: a regression
    requests: int = 3  # judged completions sent one after the other (the first one's figures are kept)
    concurrency: int = 2  # judged completions sent at once after them
    min_accept_length: float = 1.2  # with speculation on, /server_info's avg_spec_accept_length at least this
    compare_output: str = "warn"  # greedy output other than the last pass's (same prompt, model, max_tokens):
    #                               warn | fail (reason output-changed) | off


@dataclass(frozen=True)
class ServiceConfig:
    """How to restart the service a target's package runs, read its logs, and reach it."""

    restart: str
    base_url: str
    logs: str | None = None
    ready_timeout: float = 900.0
    restart_timeout: float = 300.0
    logs_timeout: float = 30.0
    match_unit: bool = True  # the process on base_url's port must run the unit role file's last ExecStart
    smoke: SmokeConfig = SmokeConfig()


_SERVICE_KEYS = {
    "restart": str,
    "logs": str,
    "base_url": str,
    "ready_timeout": float,
    "restart_timeout": float,
    "logs_timeout": float,
    "match_unit": bool,
    "smoke": dict,
}
_SMOKE_KEYS = {
    "prompt": str,
    "max_tokens": int,
    "timeout": float,
    "min_tokens": int,
    "min_tokens_per_s": float,
    "endpoint": str,
    "model": str,
    "warmup": int,
    "max_slowdown": float,
    "requests": int,
    "concurrency": int,
    "min_accept_length": float,
    "compare_output": str,
}


def load(config: TargetConfig) -> ServiceConfig | None:
    """The target's service, or None when it has no [service] table; every problem raised at once."""
    table = config.raw.get("service")
    if table is None:
        return None
    where = f"[targets.{config.name}.service]"
    if not isinstance(table, dict):
        raise BadInput(f"{where} is not a table", "write it as a [targets.NAME.service] table")
    problems = _check(table, _SERVICE_KEYS, where)
    smoke = table.get("smoke", {})
    if isinstance(smoke, dict):
        problems += _check(smoke, _SMOKE_KEYS, f"[targets.{config.name}.service.smoke]")
    for key in ("restart", "base_url"):
        if key not in table:
            problems.append(f"{where} lacks {key}")
    url = table.get("base_url")
    if isinstance(url, str) and not url.startswith(("http://", "https://")):
        problems.append(f"{where} base_url {url!r} is not an http:// or https:// URL")
    if isinstance(table.get("restart"), str) and not table["restart"].strip():
        problems.append(f"{where} restart is empty")
    for key in ("ready_timeout", "restart_timeout", "logs_timeout"):
        if _number(table.get(key)) and table[key] <= 0:
            problems.append(f"{where} {key} must be above 0")
    if isinstance(smoke, dict):
        problems += _check_smoke(smoke, f"[targets.{config.name}.service.smoke]")
    if problems:
        raise BadInput("; ".join(problems), "see [targets.NAME.service] in docs/configuration.md")
    smoke_values: dict[str, Any] = {k: (float(v) if _SMOKE_KEYS[k] is float else v) for k, v in smoke.items()}
    values: dict[str, Any] = {
        k: (float(v) if _SERVICE_KEYS[k] is float else v) for k, v in table.items() if k != "smoke"
    }
    values["base_url"] = values["base_url"].rstrip("/")
    return ServiceConfig(**values, smoke=SmokeConfig(**smoke_values))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check(table: dict[str, Any], keys: dict[str, Any], where: str) -> list[str]:
    problems = []
    for key, value in table.items():
        kind = keys.get(key)
        if kind is None:
            problems.append(f"{where} has unknown key {key!r} (known: {', '.join(keys)})")
        elif kind is float and not _number(value):
            problems.append(f"{where} {key} must be a number, not {value!r}")
        elif kind is int and (not isinstance(value, int) or isinstance(value, bool)):
            problems.append(f"{where} {key} must be a whole number, not {value!r}")
        elif kind in (str, dict, bool) and not isinstance(value, kind):
            what = {str: "string", dict: "table", bool: "true or false"}[kind]
            problems.append(f"{where} {key} must be {'a ' * (kind is not bool)}{what}, not {value!r}")
    return problems


def _check_smoke(smoke: dict[str, Any], where: str) -> list[str]:
    problems = []
    if isinstance(smoke.get("max_tokens"), int) and smoke["max_tokens"] < 1:
        problems.append(f"{where} max_tokens must be at least 1")
    if isinstance(smoke.get("min_tokens"), int) and smoke["min_tokens"] < 0:
        problems.append(f"{where} min_tokens must not be negative")
    mx, mn = smoke.get("max_tokens", SmokeConfig.max_tokens), smoke.get("min_tokens", SmokeConfig.min_tokens)
    if isinstance(mx, int) and isinstance(mn, int) and mn > mx:
        problems.append(f"{where} min_tokens ({mn}) is above max_tokens ({mx})")
    if _number(smoke.get("timeout")) and smoke["timeout"] <= 0:
        problems.append(f"{where} timeout must be above 0")
    if _number(smoke.get("min_tokens_per_s")) and smoke["min_tokens_per_s"] < 0:
        problems.append(f"{where} min_tokens_per_s must not be negative")
    if isinstance(smoke.get("endpoint"), str) and smoke["endpoint"] not in ENDPOINTS:
        problems.append(f"{where} endpoint must be one of {', '.join(ENDPOINTS)}, not {smoke['endpoint']!r}")
    if isinstance(smoke.get("warmup"), int) and smoke["warmup"] < 0:
        problems.append(f"{where} warmup must not be negative")
    if _number(smoke.get("max_slowdown")) and smoke["max_slowdown"] < 1:
        problems.append(f"{where} max_slowdown must be at least 1")
    if isinstance(smoke.get("requests"), int) and smoke["requests"] < 1:
        problems.append(f"{where} requests must be at least 1")
    if isinstance(smoke.get("concurrency"), int) and smoke["concurrency"] < 0:
        problems.append(f"{where} concurrency must not be negative")
    if _number(smoke.get("min_accept_length")) and smoke["min_accept_length"] < 0:
        problems.append(f"{where} min_accept_length must not be negative (0 turns the check off)")
    if isinstance(smoke.get("compare_output"), str) and smoke["compare_output"] not in COMPARE_OUTPUT:
        problems.append(
            f"{where} compare_output must be one of {', '.join(COMPARE_OUTPUT)}, "
            f"not {smoke['compare_output']!r}"
        )
    if isinstance(smoke.get("prompt"), str) and not smoke["prompt"].strip():
        problems.append(f"{where} prompt is empty")
    return problems
