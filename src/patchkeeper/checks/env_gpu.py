"""The GPU part of an environment fingerprint (host/gpu.py takes it): in words, each GPU's memory
health, and what changed from one fingerprint to another."""

from __future__ import annotations

from typing import Any


def gpu_text(g: dict[str, Any] | None) -> str:
    """The GPU part in one line: the driver and CUDA versions, and the GPUs by model (or why there are none)."""
    if not g or not g.get("driver"):
        return (g or {}).get("note") or "no NVIDIA driver"
    gpus = g.get("gpus") or []
    models: dict[str, int] = {}
    for x in gpus:
        label = f"{x.get('name') or '?'}" + (f" ({x['memory_total']})" if x.get("memory_total") else "")
        models[label] = models.get(label, 0) + 1
    names = ", ".join(f"{n}x {m}" if n > 1 else m for m, n in models.items())
    return f"driver {g['driver']}, CUDA {g.get('cuda') or '?'}, {len(gpus)} GPU(s)" + (
        f": {names}" if names else ""
    )


def gpu_health(g: dict[str, Any] | None) -> list[str]:
    """One line per GPU: bus id, name, and the retired pages / remapped rows / ECC counts it reports."""
    out = []
    for x in (g or {}).get("gpus") or []:
        facts = [
            f"{k} {' '.join(f'{n}={v}' for n, v in (x.get(k) or {}).items())}"
            for k in ("retired_pages", "remapped_rows", "ecc")
            if x.get(k)
        ]
        out.append(
            f"{x.get('bus_id')} {x.get('name')} {x.get('uuid')}: "
            + ("; ".join(facts) or "no memory health reported")
        )
    return out


def _health(x: dict[str, Any], ecc: bool) -> dict[str, Any]:
    """What a GPU's memory health is compared by; ECC (mode, uncorrectable counts) where both sides read it
    (fingerprints taken before patchkeeper read ECC have none)."""
    out = {"retired_pages": x.get("retired_pages"), "remapped_rows": x.get("remapped_rows")}
    if ecc:
        out["ecc"] = {k: v for k, v in x["ecc"].items() if k == "mode" or k.endswith("_uncorrectable")}
    return out


def gpu_changes(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(what, kind, detail) for every change of the GPU part from `a` to `b`: the driver, CUDA, the count
    and models of the GPUs, and each GPU's memory health (by its UUID)."""
    out: list[tuple[str, str, str]] = []
    if bool(a.get("driver")) != bool(b.get("driver")):
        return [("driver", "changed", f"{gpu_text(a)} -> {gpu_text(b)}")]
    if not a.get("driver"):
        return out
    for key, label in (("driver", "driver"), ("cuda", "CUDA")):
        if a.get(key) != b.get(key):
            out.append((label, "changed", f"{a.get(key)} -> {b.get(key)}"))
    ga, gb = a.get("gpus") or [], b.get("gpus") or []
    if len(ga) != len(gb):
        out.append(("count", "changed", f"{len(ga)} -> {len(gb)} GPU(s)"))

    def models(gs: list[dict[str, Any]]) -> list[tuple[Any, Any]]:
        return sorted((g.get("name") or "?", g.get("memory_total") or "?") for g in gs)  # noqa: E731

    if models(ga) != models(gb):
        out.append(("models", "changed", f"{gpu_text(a)} -> {gpu_text(b)}"))
    by_uuid = {g.get("uuid"): g for g in ga}
    for g in gb:
        old = by_uuid.get(g.get("uuid"))
        ecc = old is not None and bool(old.get("ecc")) and bool(g.get("ecc"))
        if old is not None and _health(old, ecc) != _health(g, ecc):
            out.append(
                (
                    g.get("uuid") or "?",
                    "health",
                    f"{g.get('bus_id')}: retired pages {old.get('retired_pages')} -> {g.get('retired_pages')}, "
                    f"remapped rows {old.get('remapped_rows')} -> {g.get('remapped_rows')}"
                    + (f", ECC {_health(old, ecc)['ecc']} -> {_health(g, ecc)['ecc']}" if ecc else ""),
                )
            )
    return out
