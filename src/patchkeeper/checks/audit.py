"""Audit a target: sort every file that is not as installed into patched, drift, environment, bytecode, probe."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from ..errors import BadInput
from ..host.bytecode import recompiled
from ..host.contract import ROLE_PREFIX, InterpreterFacts, RecordCheck, TreeRequest
from ..host.disk import map_threads, normalize_name
from ..records.ledger import Ledger, LedgerEntry, State
from ..records.manifest import change_kind, differences
from ..targets import Target
from . import environment, installation
from .audit_report import (  # re-exported: the audit's answer, where its callers find it
    CLASSES as CLASSES,
    INSTALLATION as INSTALLATION,
    AuditReport as AuditReport,
    Finding as Finding,
)
from .scan import scan_request

PROBE_TIMEOUT = 60.0
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_PROBE = (
    "import sys\n"
    "if sys.path and sys.path[0] in ('', '.'):\n"
    "    del sys.path[0]\n"
    "import importlib, traceback\n"
    "try:\n"
    "    importlib.import_module(sys.argv[1])\n"
    "except BaseException as exc:\n"
    "    print(traceback.format_exception_only(type(exc), exc)[-1].strip())\n"
    "    sys.exit(3)\n"
)


def check_probes(modules: Iterable[str]) -> list[str]:
    modules = list(modules)
    bad = [m for m in modules if not _MODULE.fullmatch(m)]
    if bad:
        raise BadInput(
            f"--probe {bad[0]!r} is not a module name",
            "pass a dotted import path, e.g. sglang.srt.server_args",
        )
    return modules


cache_dir = environment.audit_dir  # where the audit keeps its caches


def compared_pairs(target: Target) -> str:
    """Where the target keeps the pairs of source and pyc bytes found to hold the same code
    (host/pycompare.Compared)."""
    return posixpath.join(cache_dir(target), "bytecode.compared")


def is_warm(target: Target) -> bool:
    """True when every distribution of the target has a stat cache, so an audit hashes little."""
    have = set(target.agent.listdir(cache_dir(target)))
    return bool(have) and all(
        name + ".json" in have
        for name in target.agent.dist_infos(target.info.site)
        if name != target.info.dist_info
    )


def audit_target(
    target: Target,
    ledger: Ledger,
    probes: Iterable[str] = (),
    probe_timeout: float = PROBE_TIMEOUT,
    owners: dict[str, str] | None = None,
    rehash: bool = False,
) -> AuditReport:
    """Audit one target, opened in a Session (so an interrupted transaction was recovered first);
    `rehash`: with no cache or seal, every file read and hashed again, every pyc recompiled and compared."""

    info, agent = target.info, target.agent
    probes = check_probes(probes)
    current = ledger.current()
    findings: list[Finding] = []
    notes: list[str] = []
    files = 0

    drift: dict[str, str] = {}  # the package against the recorded state
    dists = agent.dist_infos(info.site)
    others = [d for d in dists if d != info.dist_info or current is None]

    def record_findings(checks: dict[str, RecordCheck]) -> None:
        nonlocal files
        for name, result in checks.items():
            files += result.files
            dist = name[: -len(".dist-info")].rpartition("-")[0] or name
            cls = "drift" if name == info.dist_info else "environment"
            findings.extend(
                Finding(cls, p, kind, detail, dist) for p, kind, detail in result.findings if kind != "shared"
            )
            notes.extend(
                f"{p}: a file of {dist}, {detail}; not drift"
                for p, kind, detail in result.findings
                if kind == "shared"
            )
            if result.note:
                notes.append(f"{dist}: {result.note}")

    entry: LedgerEntry | None = None  # the current state's newest environment fingerprint
    facts: InterpreterFacts | None = None
    tag = "cpython-" + "".join(info.python_version.split(".")[:2])
    caches = None if rehash else cache_dir(target)
    bytecode_cache = None if caches is None else posixpath.join(caches, "bytecode.cache")
    compared = compared_pairs(target)  # keyed by bytes, not identity: read under --rehash too
    # the fingerprint's RECORD answers (a change's baseline checked every distribution as the audit does)
    also = None if caches is None else environment.record_seals(target)
    if (
        current is None
    ):  # no recorded state: the bytecode of the sources that differ from RECORD is recompiled
        # every distribution against its RECORD, in one call: its threads take one distribution after
        # another to the end (in chunks of 16, each chunk's end left a CPU idle: about 1 s of a first
        # audit of the serving venv)
        if others:
            record_findings(agent.audit_record(info.site, others, caches, also))
        findings.extend(_unlisted(target, rehash))
        pyc = agent.audit_bytecode(
            info.site,
            tag,
            sorted({f.path for f in findings if _recompile(f)}),
            bytecode_cache,
            "" if rehash else None,
            compared,
        )
        if (
            not rehash
        ):  # the package's pycs as its first baseline judges them (hash-based or written after RECORD)
            seen = {p for p, _, _ in pyc.findings}
            pyc = replace(
                pyc,
                findings=pyc.findings
                + tuple(
                    f
                    for f in agent.installed_bytecode(
                        info.site, tag, info.top_dirs(), f"{info.site}/{info.dist_info}/RECORD", compared
                    ).findings
                    if f[0] not in seen
                ),
            )
    else:  # the other distributions against their RECORD, the package against its recorded state and
        # the baseline, and the bytecode, in one pass (the sources found changed are recompiled there)
        patched = _patched(ledger, current, owners)
        verify = {f.path for f in patched if _recompile(f)}
        entry = environment.entry_of(ledger, current)  # the native libraries, read in the same pass
        facts = target.interpreter_facts() if entry is not None else None
        native_sites = tuple(environment.site_dirs(target, facts)) if facts is not None else ()
        tree = agent.audit_tree(
            TreeRequest(
                info.store,
                current.manifest,
                scan_request(target, cached=not rehash),
                tag,
                tuple(sorted(verify)),
                bytecode_cache,
                None if caches is None else posixpath.join(caches, "tree.seal"),
                tuple(others),
                caches,
                native_sites,
                None if rehash else environment.native_cache(target),
                "" if rehash else _baseline_file(ledger),
                compared,
                also,
            )
        )
        record_findings(tree.records)
        files += tree.files
        drift = {k: change_kind(*pair) for k, pair in sorted(tree.comparison.pairs.items())}
        standing = tree.comparison.standing  # what stands at a removed file's path, if anything
        findings.extend(
            Finding(
                "drift",
                key,
                kind,
                f"{kind} since state {current.id}, by no transaction"
                + (f": {standing[key]} stands in its place, not a regular file" if key in standing else ""),
            )
            for key, kind in drift.items()
        )
        findings.extend(f for f in patched if f.path not in tree.comparison.pairs)
        pyc = tree.bytecode
    files += pyc.pycs

    if current is not None:
        then = environment.load(target, entry.env or "") if entry is not None else None
        damaged = {
            p: detail
            for check in tree.records.values()
            for p, kind, detail in check.findings
            if kind in ("changed", "missing", "not-a-file")
        }
        native, note = _native(target, current, entry, then, tree.native, damaged)
        findings.extend(native)
        notes.extend(note)
        if entry is not None and then is not None:
            when = f"{entry.kind} {entry.id}"
            findings.extend(_distributions_since(then, tree.records, when, info.package))
            if "startup" in then:  # code that runs at every start without any distribution's RECORD naming it
                findings.extend(
                    Finding(
                        "environment",
                        key,
                        kind,
                        f"{detail} (not there at {when})" if kind == "added" else f"{detail} (since {when})",
                    )
                    for key, kind, detail in environment.startup_changes(
                        then["startup"], environment.startup_now(target, facts)
                    )
                )

    findings.extend(Finding("bytecode", p, kind, detail) for p, kind, detail in pyc.findings)
    if pyc.stale:
        notes.append(
            f"{pyc.stale} pyc file(s) are older than their source; Python recompiles them on "
            "import, so they run no old code"
        )

    if probes:
        lines = map_threads(lambda m: _probe(target, m, probe_timeout), probes, 4)
        for module, line in zip(probes, lines):
            if line is not None:
                findings.append(Finding("probe", module, "import-failed", line))
    if current is not None:
        files += _installation(target, ledger, findings, notes)
        if tree.linked:
            shown = ", ".join(f"{key} ({n} links)" for key, n in tree.linked_examples)
            notes.append(
                f"{tree.linked} managed file(s) share their inode with other files (hard links, as uv "
                f"installs from its cache): {shown}{' …' if tree.linked > len(tree.linked_examples) else ''}"
                "; a write in place would change every linked copy (uv's cache and the venvs linked to "
                "it); patchkeeper replaces files by rename, never in place"
            )
    order = {c: i for i, c in enumerate(CLASSES)}
    findings.sort(key=lambda f: (order[f.cls], f.dist, f.path))
    return AuditReport(
        target.name, info.host, info.package, current, files, tuple(findings), tuple(notes), drift
    )


def _installation(target: Target, ledger: Ledger, findings: list[Finding], notes: list[str]) -> int:
    """The managed distribution's installation beside its code state: what pip, uv or a person did to
    it since the state was recorded (checks/installation.py), and its RECORD rows outside the package
    (console scripts, the installer's records) against RECORD. Returns the files checked."""

    info = target.info
    change = installation.check(target, ledger)
    if change is not None:
        told = installation.tell(target, ledger, change)
        if told.trouble:
            findings.insert(0, Finding(INSTALLATION, info.dist_info, change.kind, told.line, info.package))
        else:
            notes.append(told.line)
    checked = target.agent.audit_installation(info.site, info.dist_info, cache_dir(target))
    findings.extend(Finding("drift", p, kind, detail, info.package) for p, kind, detail in checked.findings)
    return checked.files


def _patched(ledger: Ledger, current: State, owners: dict[str, str] | None) -> list[Finding]:
    """What the current state records as changed since the baseline: patched, in a file the applied
    patch sets touch (`owners`, when known; a snapshot can record other edits), else drift (a hand
    edit a snapshot recorded). Nothing is loaded when the current state is the baseline's."""
    base_state = ledger.baseline()
    if base_state is None or base_state.manifest == current.manifest:
        return []
    recorded = ledger.load_manifest(current)
    out = []
    for key, kind in differences(ledger.load_manifest(base_state), recorded).items():
        if owners is None or key in owners:
            by = owners[key] if owners else current.stack_text()
            out.append(Finding("patched", key, kind, f"{kind} by the applied patch sets ({by})"))
        else:
            out.append(
                Finding(
                    "drift",
                    key,
                    kind,
                    f"{kind} since the baseline by no applied patch set "
                    f"(a hand edit recorded in state {current.id})",
                )
            )
    return out


def _unlisted(target: Target, rehash: bool = False) -> list[Finding]:
    """Before any baseline: the files inside the managed package that its RECORD does not list
    (added by hand, as adoption's refusal names them; bytecode and the roles aside)."""

    info = target.info
    dist = target.agent.dist_info([info.site], info.package)
    if dist is None:
        return []
    listed = set(dist.record)
    rows = target.agent.scan(scan_request(target, cached=not rehash)).rows
    return [
        Finding(
            "drift",
            key,
            "added",
            f"not in {info.package}'s RECORD: added by hand after the install "
            "(a baseline is refused until it is adopted)",
            info.package,
        )
        for key in sorted(rows)
        if not key.startswith(ROLE_PREFIX) and key not in listed
    ]


def _baseline_file(ledger: Ledger) -> str | None:
    """The baseline's ledger entry on the target (write-once): the pycs written since it are
    recompiled and compared whatever their header says (host/bytecode._judge)."""
    for slot in ledger.entries().slots:
        if slot.kind == "baseline":
            return posixpath.join(ledger.dir, slot.name)
    return None


def _recompile(f: Finding) -> bool:
    """Whether a finding names a source whose pycs the bytecode check recompiles and compares."""
    return recompiled(f.path, f.kind)


def _native(
    target: Target,
    current: State,
    entry: LedgerEntry | None,
    then: dict[str, Any] | None,
    now: dict[str, Any] | None,
    damaged: dict[str, str],
) -> tuple[list[Finding], list[str]]:
    """Sonames that resolved when the current state's fingerprint (`then`, kept by `entry`) was
    taken and do not now, or resolve to another file or other bytes (never one already unresolved
    then); `now`: the native part the tree's pass read (environment.take's). An object that differs
    from its RECORD (`damaged`) is named damaged, its libraries not judged."""

    if entry is None or then is None:
        return [], [
            f"state {current.id} was recorded without an environment fingerprint: native libraries "
            "not compared (the next change or snapshot records one)"
        ]
    changes = environment.native_changes(
        then.get("native") or {},
        now or {},
        same_hash=then.get("algorithm") == target.algorithm,
        damaged=damaged,
    )
    return [
        Finding("native", path, kind, f"{detail} (as of {entry.kind} {entry.id})")
        for path, kind, detail in changes
    ], []


def _distributions_since(
    then: dict[str, Any], records: dict[str, RecordCheck], when: str, package: str
) -> list[Finding]:
    """The distributions of the site dir (their RECORD checks, by dist-info name) against the
    fingerprint of the current state (`then`, taken at `when`): one installed since, another
    version, or another build of the same version (its RECORD's identity differs, though its files
    match it: a rebuilt wheel reinstalled)."""

    recorded = then.get("distributions") or {}
    out = []
    for dist_info, check in sorted(records.items()):
        stem = dist_info[: -len(".dist-info")]
        name, _, version = stem.partition("-")
        key = normalize_name(name)
        if key == normalize_name(package):
            continue
        was = recorded.get(key)
        if was is None:
            out.append(
                Finding("environment", dist_info, "added", f"{name} {version} installed since {when}", name)
            )
        elif was.get("version") != version:
            out.append(
                Finding(
                    "environment",
                    dist_info,
                    "version",
                    f"{name} {was.get('version')} -> {version} since {when}",
                    name,
                )
            )
        elif was.get("identity") and check.identity and was["identity"] != check.identity:
            out.append(
                Finding(
                    "environment",
                    dist_info,
                    "rebuilt",
                    f"{name} {version} is another build than at {when}: its RECORD lists other files "
                    "or bytes (its files match that RECORD: reinstalled from another wheel)",
                    name,
                )
            )
    return out


def _probe(target: Target, module: str, timeout: float) -> str | None:
    """None when `module` imports in the target's interpreter, else the exception's last line."""
    code, out, err = target.run_python(
        _PROBE, (module,), timeout=timeout, isolated=False, python=target.info.python
    )
    if code == 0:
        return None
    if code == 124 and b"timed out" in err:
        return f"timed out after {timeout:g}s"
    lines = (
        out.decode(errors="replace").strip().splitlines() or err.decode(errors="replace").strip().splitlines()
    )
    if code < 0:
        return f"the interpreter died of signal {-code}" + (f": {lines[-1]}" if lines else "")
    return lines[-1] if lines else f"exit {code}"
