"""Environment fingerprints on the controller's side: take, store with a state, load, compare."""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, cast

from ..errors import PatchkeeperError, StoreError
from ..host.contract import InterpreterFacts
from ..host.disk import normalize_name
from ..host.distcheck import SEALS
from ..host.elf import is_candidate
from ..records.ledger import Ledger, LedgerEntry, State
from ..targets import Target
from .env_gpu import gpu_changes

FORMAT = 1
AREAS = ("interpreter", "system", "distribution", "native", "gpu", "startup")


@dataclass(frozen=True)
class Difference:
    """One difference between two fingerprints."""

    area: str  # one of AREAS
    subject: str  # a distribution, an object's path, "driver", "python"...
    kind: str  # added | removed | version | files | unresolved | moved | changed | resolved | gone
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"area": self.area, "subject": self.subject, "kind": self.kind, "detail": self.detail}


# ---- taking and keeping ------------------------------------------------------------------------
def cache_root(target: Target) -> str:
    """The fingerprint's stat caches (RECORD digests, ELF headers, library digests): the audit's
    kind, in a directory of their own, so a change's fingerprint does not make the audit's caches
    look warm to `status` (which audits only when an audit has run)."""
    return posixpath.join(target.info.state_dir, "env")


def record_seals(target: Target) -> str:
    """The fingerprint's RECORD seals of the target's site dir (host/fingerprint.py's main site): the
    audit reads them, as the fingerprint reads the audit's (distcheck.RecordSeals' `also`)."""
    return posixpath.join(cache_root(target), SEALS)


def audit_dir(target: Target) -> str:
    """Where the audit keeps its caches (checks/audit.py): the fingerprint reads its RECORD seals, since
    an answer sealed there that still holds is the one its own check would give."""
    return posixpath.join(target.info.state_dir, "audit")


def native_cache(target: Target) -> str:
    """Where the fingerprint's native part keeps its caches (host/fingerprint.py take's)."""
    return posixpath.join(cache_root(target), "native")


def site_dirs(target: Target, facts: InterpreterFacts | None = None) -> list[str]:
    """The site dirs a fingerprint covers: its interpreter's (`facts`), and the target's own."""
    found = list((facts or target.interpreter_facts()).where["sites"])
    if target.info.site not in found:
        found.append(target.info.site)
    return found


def take(target: Target, parts: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The target's fingerprint now: one call for its interpreter's facts, one to its agent."""
    info = target.info
    facts = target.interpreter_facts()
    sites = site_dirs(target, facts)
    doc = target.agent.fingerprint(
        sites,
        cache_root(target),
        info.site,
        list(parts) if parts else None,
        info.dist_info,
        facts.where.get("stdlib"),
        posixpath.join(audit_dir(target), SEALS),
    ).to_wire()
    doc.update(
        format=FORMAT,
        package=info.package,
        interpreter={
            "implementation": facts.implementation,
            "version": facts.version,
            "tags": facts.tags,
            "machine": facts.machine,
            "libc": facts.libc,
        },
        where={"host": info.host, "python": info.python, "prefix": facts.where["prefix"], "sites": sites},
    )
    return doc


def startup_now(target: Target, facts: InterpreterFacts | None = None) -> dict[str, Any]:
    """The fingerprint's start-up part now (host/startup.py): one call to the target's agent."""
    info = target.info
    facts = facts or target.interpreter_facts()
    found = target.agent.fingerprint(
        site_dirs(target, facts), None, info.site, ["startup"], info.dist_info, facts.where.get("stdlib")
    ).startup
    return found or {}


def encode(fp: dict[str, Any]) -> bytes:
    return json.dumps(fp, sort_keys=True, separators=(",", ":")).encode()


# What a transaction's fingerprint holds: other distributions by their RECORD's identity, not their
# files (host/fingerprint.distributions), so a change does not cost more in a larger environment.
CHANGE_PARTS = ("system", "identities", "native", "gpu", "startup")


def record(entry: LedgerEntry, target: Target, parts: tuple[str, ...] | None = None) -> LedgerEntry:
    """`entry` with a fingerprint taken now and kept in the target's store (its digest in `env`);
    when it cannot be taken, the change goes on and the entry says why in `env_error`."""

    try:
        return replace(entry, env=target.agent.store_put(target.info.store, encode(take(target, parts))))
    except (PatchkeeperError, OSError) as exc:
        return replace(entry, env_error=str(exc).splitlines()[0])


def recording(target: Target, alongside: list[str]) -> Callable[[LedgerEntry], LedgerEntry]:
    """`record` for a transaction that changes the files `alongside`, the fingerprint had as the
    change's context: at once when the transaction changes a shared object (the fingerprint reads
    every one, so it is taken before any file changes), else when the transaction asks, just before
    its commit point. A fingerprint that cannot be taken does not stop the change (`env_error`)."""
    if not changes_objects(alongside):
        return lambda entry: record(entry, target, CHANGE_PARTS)

    try:
        data = encode(take(target, CHANGE_PARTS))
    except (PatchkeeperError, OSError) as exc:
        failed = str(exc).splitlines()[0]
        return lambda entry: replace(entry, env_error=failed)

    def with_it(entry: LedgerEntry) -> LedgerEntry:
        try:
            return replace(entry, env=target.agent.store_put(target.info.store, data))
        except (PatchkeeperError, OSError) as exc:
            return replace(entry, env_error=str(exc).splitlines()[0])

    return with_it


def changes_objects(paths: list[str]) -> bool:
    """Whether any of `paths` is a candidate shared object (which the fingerprint reads)."""

    return any(is_candidate(posixpath.basename(p)) for p in paths)


def load(target: Target, digest: str) -> dict[str, Any]:
    try:
        return cast("dict[str, Any]", json.loads(target.agent.store_get(target.info.store, digest)))
    except (PatchkeeperError, ValueError) as exc:
        raise StoreError(
            f"the environment fingerprint {digest[:19]}… of target {target.name} cannot be read: {exc}",
            "record a new state (patchkeeper snapshot) to keep a fresh one",
        ) from None


def entry_of(ledger: Ledger, spec: str | State) -> LedgerEntry | None:
    """The ledger entry holding the newest fingerprint of a state (a transaction id names its own
    entry); None when no entry of that state has one (a ledger from before fingerprints)."""
    entries = ledger.entries()
    if isinstance(spec, str):
        exact = [i for i, slot in enumerate(entries.slots) if slot.id == spec]
        if exact:
            return entries[exact[0]] if entries[exact[0]].env else None
        spec = ledger.find_state(spec)
    return next((e for e in entries.newest(spec.id) if e.env), None)


def last_passing(ledger: Ledger, state: State) -> LedgerEntry | None:
    """The newest passing verification of a state that kept a fingerprint."""
    for e in ledger.entries().newest(state.id, "verify"):
        verdict: Any = dict(e.extra).get("verify") or {}
        if e.env and verdict.get("ok"):
            return e
    return None


def since_last_pass(
    target: Target, ledger: Ledger, state: State
) -> tuple[LedgerEntry | None, list[Difference], dict[str, Any]]:
    """The newest passing verification of `state` with a fingerprint, what changed in the
    environment since then, and the GPU facts now (the fingerprint's `gpu` part)."""
    last = last_passing(ledger, state)
    if last is None or last.env is None:
        return None, [], {}
    now = take(target)
    return last, compare(load(target, last.env), now), now.get("gpu") or {}


# ---- comparing ---------------------------------------------------------------------------------
def interp_text(fp: dict[str, Any]) -> str:
    i = fp.get("interpreter") or {}
    t = i.get("tags") or {}
    libc = i.get("libc") or {}
    return (
        f"{i.get('implementation', '?')} {i.get('version', '?')} "
        f"({t.get('interpreter', '?')}-{t.get('abi', '?')}-{t.get('platform', '?')}), "
        f"{libc.get('name', '?')} {libc.get('version', '?')}"
    )


def compare(a: dict[str, Any], b: dict[str, Any]) -> list[Difference]:
    """What changed from fingerprint `a` to `b`. The managed package's files are code state
    (`patchkeeper diff` shows them), so only its version counts here."""
    out: list[Difference] = []
    if interp_text(a) != interp_text(b):
        out.append(Difference("interpreter", "python", "changed", f"{interp_text(a)} -> {interp_text(b)}"))
    sa, sb = a.get("system") or {}, b.get("system") or {}
    for key, label in (("os", "OS"), ("kernel", "kernel")):
        if sa.get(key) != sb.get(key):
            out.append(Difference("system", label, "changed", f"{sa.get(key)} -> {sb.get(key)}"))
    out += _distributions(
        a.get("distributions") or {}, b.get("distributions") or {}, {a.get("package"), b.get("package")}
    )
    out += [
        Difference("native", path, kind, detail)
        for path, kind, detail in native_changes(
            a.get("native") or {},
            b.get("native") or {},
            same_hash=a.get("algorithm") == b.get("algorithm"),
            both_ways=True,
            damaged=damaged_objects(b.get("distributions") or {}),
        )
    ]
    out += [
        Difference("gpu", what, kind, detail)
        for what, kind, detail in gpu_changes(a.get("gpu") or {}, b.get("gpu") or {})
    ]
    if "startup" in a and "startup" in b:  # (a fingerprint from before start-up code was kept says nothing)
        out += [
            Difference("startup", key, kind, detail)
            for key, kind, detail in startup_changes(a["startup"], b["startup"])
        ]
    return out


def startup_changes(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(what, kind, detail) for every piece of start-up code (host/startup.py) added, removed or
    changed from `a` to `b`: a .pth file with import lines, a site hook, a plugin entry point."""
    out = []
    for key in sorted(set(a) | set(b)):
        was: Any = a.get(key)
        now: Any = b.get(key)
        if was == now:
            continue
        if was is None:
            kind, detail = "added", startup_text(key, now)
        elif now is None:
            kind, detail = "removed", "no longer runs at start-up"
        else:
            kind, detail = "changed", startup_text(key, now)
        out.append((key, kind, detail))
    return out


def startup_text(key: str, what: dict[str, Any]) -> str:
    if key.startswith("pth "):
        lines = what.get("code") or []
        return (
            "runs in every interpreter of the site dir: "
            + "; ".join(lines[:3])
            + (" …" if len(lines) > 3 else "")
        )
    if key.startswith("entry point "):
        return f"{what.get('value')} from {what.get('dist')}, loaded by the package as a plugin"
    return f"imported at every interpreter's start ({what.get('digest', '')[:19]}…)"


def _distributions(a: dict[str, Any], b: dict[str, Any], managed: Iterable[str | None]) -> list[Difference]:
    managed = {normalize_name(m) for m in managed if m}
    out = []
    for key in sorted(set(a) | set(b)):
        da: Any = a.get(key)
        db: Any = b.get(key)
        if da is None:
            out.append(
                Difference(
                    "distribution", db["name"], "added", f"{db['version']} (installed by {db['installer']})"
                )
            )
        elif db is None:
            out.append(Difference("distribution", da["name"], "removed", f"{da['version']} is gone"))
        elif da["version"] != db["version"]:
            out.append(
                Difference("distribution", db["name"], "version", f"{da['version']} -> {db['version']}")
            )
        if da is None or db is None or da["version"] != db["version"] or key in managed:
            continue
        out += _rebuilt(da, db)
        if "differ" in db and "differ" not in da and db["differ"]:  # `a` checked identities only (a change's)
            parts = [f"{p} ({k})" for p, k in db["differ"]]
            out.append(
                _files(
                    db["name"], f"{len(parts)} file(s) differ from RECORD now (files not checked then)", parts
                )
            )
        if "differ" in da and "differ" in db and da["differ"] != db["differ"]:
            was = {p for p, _ in da.get("differ") or []}
            now = {p for p, _ in db.get("differ") or []}
            kinds = dict(map(tuple, db.get("differ") or []))
            parts = [f"{p} ({kinds.get(p)})" for p in sorted(now - was)]
            parts += [f"{p} (as in RECORD again)" for p in sorted(was - now)]
            parts += [
                f"{p} ({kinds.get(p)})"
                for p in sorted(was & now)
                if dict(map(tuple, da["differ"])).get(p) != kinds.get(p)
            ]
            out.append(_files(db["name"], f"{len(now)} file(s) differ from RECORD (was {len(was)})", parts))
    return out


def _files(name: str, head: str, parts: list[str]) -> Difference:
    """A distribution's files that differ from its RECORD: `head`, then the first eight of `parts`."""
    more = f" … and {len(parts) - 8} more" if len(parts) > 8 else ""
    return Difference("distribution", name, "files", f"{head}: " + ", ".join(parts[:8]) + more)


def _rebuilt(da: dict[str, Any], db: dict[str, Any]) -> list[Difference]:
    """A distribution of one version whose RECORD now lists other files or hashes than then: another
    build reinstalled over it (a fingerprint from before identities were kept says nothing)."""
    if not da.get("identity") or not db.get("identity") or da["identity"] == db["identity"]:
        return []
    return [
        Difference(
            "distribution",
            db["name"],
            "rebuilt",
            f"{db['version']} is another build: its RECORD lists other files or bytes than then "
            f"(installed by {db.get('installer', '?')})",
        )
    ]


def _where(r: dict[str, Any] | None) -> str:
    return "not found" if r is None else r["path"]


def damaged_objects(distributions: dict[str, Any]) -> dict[str, str]:
    """Each file a fingerprint's distributions list as differing from their RECORD -> how (the
    `differ` of a full fingerprint; one a change keeps checks identities only and lists none)."""
    return {p: f"differs from RECORD ({k})" for d in distributions.values() for p, k in d.get("differ") or []}


def same_bytes(was: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether two identities of one resolved library may hold the same bytes: digests of two
    algorithms cannot tell them apart (a library inside a site dir is named by its sha256 now, by
    the target's algorithm in fingerprints taken before: fingerprint.Resolver), nor a missing one
    (a file gone while it was hashed); its distribution's RECORD check and identity judge it then."""
    a, b = was.get("digest"), now.get("digest")
    return a == b or not a or not b or a.partition(":")[0] != b.partition(":")[0]


def native_changes(
    a: dict[str, Any],
    b: dict[str, Any],
    same_hash: bool = True,
    both_ways: bool = False,
    damaged: dict[str, str] | None = None,
) -> list[tuple[str, str, str]]:
    """(object, kind, detail) for every soname that resolved in `a` and does not in `b`, or now
    resolves to another file or to changed bytes. Never one that was already unresolved in `a`;
    with `both_ways`, a soname that now resolves where it did not is listed too (kind resolved).

    An object that differs from its RECORD in `b` (`damaged`: path -> how, as distcheck says) is
    checked first: it is "damaged", and its libraries are not judged (a truncated or replaced file
    names other libraries, or none, which says nothing of the loader)."""
    out = []
    damaged = damaged or {}
    for path in sorted(p for p in damaged if p in a):
        out.append((path, "damaged", f"{damaged[path]}: the shared object itself is not as installed"))
    for path in sorted(set(a) & set(b) - set(damaged)):
        ra, rb = a[path].get("resolved") or {}, b[path].get("resolved") or {}
        for so in sorted(set(ra) | set(rb)):
            was: Any = ra.get(so)
            now: Any = rb.get(so)
            if was is not None and now is None:
                out.append((path, "unresolved", f"{so}: {_where(was)} then, not found now"))
            elif was is not None and now["path"] != was["path"]:
                out.append((path, "moved", f"{so}: {_where(was)} then, {_where(now)} now"))
            elif was is not None and same_hash and not same_bytes(was, now):
                out.append(
                    (
                        path,
                        "changed",
                        f"{so}: {now['path']} has other bytes ({was['size']} -> {now['size']} bytes)",
                    )
                )
            elif both_ways and was is None and now is not None and so in ra:
                out.append((path, "resolved", f"{so}: not found then, {_where(now)} now"))
    for path in sorted(set(a) - set(b) - set(damaged)):
        if any(r is not None for r in (a[path].get("resolved") or {}).values()):
            out.append((path, "gone", "the shared object is gone or no longer an ELF shared object"))
    return out
