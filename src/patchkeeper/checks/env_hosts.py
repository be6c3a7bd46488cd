"""Two hosts' environments side by side: each difference as one host's value and the other's, the same either way round."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..host.disk import normalize_name
from .env_gpu import gpu_text
from .environment import Difference, damaged_objects, interp_text, same_bytes, startup_text


def compare_hosts(a: dict[str, Any], b: dict[str, Any], na: str, nb: str) -> list[Difference]:
    """What differs between the fingerprints of host `na` (`a`) and host `nb` (`b`), taken now.
    Neither side is "before": each change names both values (`na`'s first), and swapping the
    hosts gives the same changes with the two values swapped (the managed package's files are
    code state, `patchkeeper diff` compares them; here only its version counts)."""

    def both(va: Any, vb: Any) -> str:
        return f"{na}: {va}; {nb}: {vb}"

    out: list[Difference] = []
    if interp_text(a) != interp_text(b):
        out.append(Difference("interpreter", "python", "differs", both(interp_text(a), interp_text(b))))
    sa, sb = a.get("system") or {}, b.get("system") or {}
    for key, label in (("os", "OS"), ("kernel", "kernel")):
        if sa.get(key) != sb.get(key):
            out.append(Difference("system", label, "differs", both(sa.get(key), sb.get(key))))
    out += _distributions(
        a.get("distributions") or {}, b.get("distributions") or {}, {a.get("package"), b.get("package")}, both
    )
    out += _native(a, b, both)
    ga, gb = a.get("gpu") or {}, b.get("gpu") or {}
    if gpu_text(ga) != gpu_text(gb) or ga.get("cuda") != gb.get("cuda"):
        out.append(
            Difference(
                "gpu",
                "stack",
                "differs",
                both(f"{gpu_text(ga)} (CUDA {ga.get('cuda')})", f"{gpu_text(gb)} (CUDA {gb.get('cuda')})"),
            )
        )
    if "startup" in a and "startup" in b:
        for key in sorted(set(a["startup"]) | set(b["startup"])):
            wa, wb = a["startup"].get(key), b["startup"].get(key)
            if wa != wb:
                out.append(
                    Difference(
                        "startup",
                        key,
                        "differs",
                        both(
                            startup_text(key, wa) if wa else "none", startup_text(key, wb) if wb else "none"
                        ),
                    )
                )
    return out


def _distributions(
    a: dict[str, Any], b: dict[str, Any], managed: set[str | None], both: Callable[[Any, Any], str]
) -> list[Difference]:
    managed = {normalize_name(m) for m in managed if m}
    out = []
    for key in sorted(set(a) | set(b)):
        da: Any = a.get(key)
        db: Any = b.get(key)
        name = (da or db)["name"]
        if da is None or db is None:
            out.append(Difference("distribution", name, "installed", both(_installed(da), _installed(db))))
            continue
        if da["version"] != db["version"]:
            out.append(Difference("distribution", name, "version", both(da["version"], db["version"])))
            continue
        if key in managed:
            continue
        if da.get("identity") and db.get("identity") and da["identity"] != db["identity"]:
            out.append(
                Difference(
                    "distribution",
                    name,
                    "build",
                    both(
                        f"a build installed by {da.get('installer', '?')}",
                        f"another, installed by {db.get('installer', '?')}",
                    ),
                )
            )
        fa, fb = _differ(da), _differ(db)
        if fa != fb:
            out.append(Difference("distribution", name, "files", "differ from RECORD: " + both(fa, fb)))
    return out


def _installed(d: dict[str, Any] | None) -> str:
    return "not installed" if d is None else f"{d['version']} (installed by {d.get('installer', '?')})"


def _differ(d: dict[str, Any]) -> str:
    """The files of a distribution that differ from its RECORD, as one short text."""
    if "differ" not in d:
        return "not checked"
    files = [f"{p} ({k})" for p, k in d["differ"]]
    if not files:
        return "none"
    return ", ".join(files[:8]) + (f" … and {len(files) - 8} more" if len(files) > 8 else "")


def _native(a: dict[str, Any], b: dict[str, Any], both: Callable[[Any, Any], str]) -> list[Difference]:
    """Each shared object whose libraries resolve otherwise on the two hosts, each soname with
    both hosts' files; an object that differs from its RECORD on either host is named damaged
    first (its own bytes are not as installed: what it asks of the loader says nothing)."""
    xa, xb = a.get("native") or {}, b.get("native") or {}
    same_hash = a.get("algorithm") == b.get("algorithm")
    hurt_a = damaged_objects(a.get("distributions") or {})
    hurt_b = damaged_objects(b.get("distributions") or {})
    out = []
    for path in sorted(set(xa) | set(xb)):
        if path in hurt_a or path in hurt_b:
            out.append(
                Difference(
                    "native",
                    path,
                    "damaged",
                    both(hurt_a.get(path, "as in RECORD"), hurt_b.get(path, "as in RECORD")),
                )
            )
            continue
        if path not in xa or path not in xb:
            out.append(
                Difference(
                    "native",
                    path,
                    "present",
                    both(
                        "an ELF shared object" if path in xa else "none",
                        "an ELF shared object" if path in xb else "none",
                    ),
                )
            )
            continue
        ra, rb = xa[path].get("resolved") or {}, xb[path].get("resolved") or {}
        for so in sorted(set(ra) | set(rb)):
            wa, wb = ra.get(so), rb.get(so)
            if (
                wa is None
                and wb is None
                or (
                    wa is not None
                    and wb is not None
                    and wa["path"] == wb["path"]
                    and (not same_hash or same_bytes(wa, wb))
                )
            ):
                continue
            out.append(
                Difference(
                    "native", path, "resolves", f"{so}: " + both(_found(wa, so in ra), _found(wb, so in rb))
                )
            )
    return out


def _found(r: dict[str, Any] | None, needed: bool) -> str:
    if not needed:
        return "not needed"
    return "not found" if r is None else f"{r['path']} ({r['size']} bytes)"
