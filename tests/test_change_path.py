"""The change path's costs follow what changed: each distribution's RECORD verdict sealed with the
identities of the files it read (host/fingerprint.py), the package's layout remembered across
commands (targets/local.py) - each never believed over the files."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import edit_file, fingerprinted

from patchkeeper.host import distcheck, fingerprint, statcache


def _take(env) -> dict:
    state = env.state_dir / "env"
    return fingerprint.take(
        [str(env.site)],
        str(state),
        str(env.site),
        ("distributions", "native"),
        os.path.join(str(env.site), "sglang-0.5.23.dist-info"),
    )


def _own_copies(site: Path, names: list[str]) -> None:
    """Files of our own in place of the hardlinks into the pristine venv, whose ctimes move whenever
    another test links or unlinks its copy of them (a seal would rightly see a change)."""
    for name in names:
        path = site / name
        copy = site / f".own-{name}"
        if path.is_dir():
            shutil.copytree(path, copy, symlinks=True)
            shutil.rmtree(path)
        else:
            shutil.copy2(path, copy)
            path.unlink()
        copy.rename(path)


def _entry_env(env, kind: str) -> dict:
    """The fingerprint kept with the newest ledger entry of `kind`, read from the target's store."""
    entries = [json.loads(p.read_text()) for p in sorted((env.state_dir / "ledger").glob("*.json"))]
    entry = [e for e in entries if e["kind"] == kind][-1]
    algo, _, hexd = entry["env"].partition(":")
    return json.loads((env.state_dir / "store" / "objects" / algo / hexd[:2] / hexd[2:]).read_bytes())


def _an_elf_object() -> Path:
    """A real shared object of this Python's own (an extension module of the standard library)."""
    import importlib

    for name in ("_json", "_csv", "array", "math", "_struct"):
        path = getattr(importlib.import_module(name), "__file__", None) or ""
        if path.endswith(".so"):
            return Path(path)
    pytest.fail("this Python has no standard extension module built as a shared object")


def _counted_checks(monkeypatch) -> list[str]:
    """The dist-infos distcheck.check_record is asked for from now on (the checks not answered by a seal)."""
    checked: list[str] = []
    real = distcheck.check_record

    def counting(site, name, cache_dir, **stats):
        checked.append(name)
        return real(site, name, cache_dir, **stats)

    monkeypatch.setattr(distcheck, "check_record", counting)
    return checked


def test_record_verdicts_are_sealed_and_refused_after_any_change_they_read(env, monkeypatch):
    """Each distribution's verdict comes back from its seal, with no RECORD read and no file
    checked, while every file it read keeps its identity; an in-place edit (same size), a file
    replaced by another inode, a rewritten RECORD and a removed distribution are each checked again
    and show."""
    monkeypatch.setattr(statcache.StatCache, "GRANULARITY_NS", -(10**12))  # seal even this fresh copy
    _own_copies(env.site, [p.name for p in env.site.iterdir() if not p.name.startswith("sglang")])
    pip_file = env.site / "pip" / "__init__.py"
    first = _take(env)
    assert (env.state_dir / "env" / "records.seal").is_file()
    assert first["distributions"]["pip"]["differ"] == [] and first["distributions"]["pip"]["files"] > 100
    assert first["distributions"]["sglang"]["managed"] is True

    checked = _counted_checks(monkeypatch)
    assert _take(env) == first and checked == []  # every verdict from its seal

    data = pip_file.read_bytes()
    with open(pip_file, "r+b") as f:  # in place, the same size: only the identity's times move
        f.write(b"#" + data[1:])
    again = _take(env)
    assert checked == ["pip-23.2.1.dist-info"]  # only the distribution whose file changed
    assert again["distributions"]["pip"]["differ"] == [["pip/__init__.py", "changed"]]
    assert again["distributions"]["setuptools"] == first["distributions"]["setuptools"]

    edit_file(pip_file, data)  # the release's bytes again, in another inode
    checked.clear()
    assert _take(env)["distributions"]["pip"]["differ"] == [] and checked == ["pip-23.2.1.dist-info"]

    record = env.site / "setuptools-65.5.0.dist-info" / "RECORD"
    lines = record.read_text().splitlines(keepends=True)
    dropped = next(line for line in lines if line.startswith("setuptools/") and ".py," in line)
    edit_file(record, "".join(line for line in lines if line != dropped).encode())
    checked.clear()
    rewritten = _take(env)["distributions"]["setuptools"]
    assert checked == ["setuptools-65.5.0.dist-info"]
    assert rewritten["files"] == first["distributions"]["setuptools"]["files"] - 1

    shutil.rmtree(env.site / "setuptools-65.5.0.dist-info")
    checked.clear()
    assert "setuptools" not in _take(env)["distributions"] and checked == []

    so = env.site / "pip" / "_speedups.so"  # a new shared object: the native part lists it
    shutil.copy(_an_elf_object(), so)
    assert "pip/_speedups.so" in _take(env)["native"]


def test_the_audits_record_answers_are_sealed_with_their_details(env, monkeypatch):
    """An audit's RECORD check of the other distributions (what an SSH target answers on every
    audit: no kept answer there) comes from its own seal while nothing it read changed, with the
    same findings and details; a same-size edit in place is checked again and shows, detail and all."""
    monkeypatch.setattr(statcache.StatCache, "GRANULARITY_NS", -(10**12))  # seal even this fresh copy
    _own_copies(env.site, [p.name for p in env.site.iterdir() if not p.name.startswith("sglang")])
    from patchkeeper.host.agent import Agent

    names = sorted(
        p.name for p in env.site.iterdir() if p.name.endswith(".dist-info") and "sglang" not in p.name
    )
    cache = str(env.state_dir / "audit")
    pip_file = env.site / "pip" / "__init__.py"
    data = pip_file.read_bytes()
    with open(pip_file, "r+b") as f:  # a finding before any seal: it must be sealed with its detail
        f.write(b"#" + data[1:])
    first = Agent().audit_record(str(env.site), names, cache)
    assert (env.state_dir / "audit" / "records.seal").is_file()
    assert [f[:2] for f in first["pip-23.2.1.dist-info"].findings] == [("pip/__init__.py", "changed")]

    checked = _counted_checks(monkeypatch)
    assert Agent().audit_record(str(env.site), names, cache) == first and checked == []

    setuptools_file = env.site / "setuptools" / "__init__.py"
    text = setuptools_file.read_bytes()
    with open(setuptools_file, "r+b") as f:
        f.write(b"#" + text[1:])
    again = Agent().audit_record(str(env.site), names, cache)
    assert checked == ["setuptools-65.5.0.dist-info"]  # only the distribution whose file changed
    assert again["pip-23.2.1.dist-info"] == first["pip-23.2.1.dist-info"]
    assert again["setuptools-65.5.0.dist-info"].findings == (
        ("setuptools/__init__.py", "changed", f"differs from RECORD (sha256, {len(text)} bytes)"),
    )


def _damage(site: Path, rng: random.Random) -> tuple[str, str]:
    """One hand change to a file a RECORD of pip or setuptools lists (or to the RECORD itself), picked
    by `rng`: the distribution's dist-info and what it did."""
    dist = rng.choice(["pip", "setuptools"])
    record = next(site.glob(f"{dist}-*.dist-info")) / "RECORD"
    rels = [line.split(",")[0] for line in record.read_text().splitlines() if ".py," in line]
    rel = rng.choice([r for r in rels if (site / r).is_file()])
    path = site / rel
    data = path.read_bytes()
    kind = rng.choice(["in place", "other inode", "shorter", "gone", "record", "same bytes"])
    if kind == "in place":  # the same size: only the times of its identity move
        with open(path, "r+b") as f:
            f.write(b"#" + data[1:])
    elif kind == "other inode":
        edit_file(path, data[:-1] + b"#")
    elif kind == "shorter":
        edit_file(path, data[: len(data) // 2])
    elif kind == "gone":
        path.unlink()
    elif kind == "record":  # RECORD rewritten without the file's row
        lines = record.read_text().splitlines(keepends=True)
        edit_file(record, "".join(line for line in lines if not line.startswith(rel + ",")).encode())
    else:  # the release's bytes written again: a new identity, no finding
        edit_file(path, data)
    return record.parent.name, f"{kind}: {rel}"


@pytest.mark.parametrize("reader", ["fingerprint", "audit"])
def test_each_check_takes_the_others_record_answers_while_they_hold(env, monkeypatch, reader):
    """A first change after an audit, or a first audit after a change, does not check the
    environment's files again: the fingerprint takes each answer the audit sealed, and the audit each
    the fingerprint sealed (read only), while every file it read keeps its identity; the writer's
    digest cache of a taken distribution is linked beside the reader's. Oracle: the same check with
    no seal at all, after each of a generated series of hand changes, some made before the writer's
    check and some after it (its seal no longer holds for those)."""
    monkeypatch.setattr(statcache.StatCache, "GRANULARITY_NS", -(10**12))  # seal even this fresh copy
    _own_copies(env.site, [p.name for p in env.site.iterdir() if not p.name.startswith("sglang")])
    from patchkeeper.host.agent import Agent

    site = str(env.site)
    managed = os.path.join(site, "sglang-0.5.23.dist-info")
    checked = _counted_checks(monkeypatch)

    def names() -> list[str]:
        return sorted(p.name for p in env.site.glob("*.dist-info") if "sglang" not in p.name)

    def fingerprint_of(root: Path | None, also: Path | None) -> dict:
        parts = ("distributions",)
        found = fingerprint.take([site], root and str(root), site, parts, managed, None, also and str(also))
        return found["distributions"]

    def audit_of(root: Path | None, also: Path | None) -> dict:
        return Agent().audit_record(site, names(), root and str(root), also and str(also))

    write, read = (audit_of, fingerprint_of) if reader == "fingerprint" else (fingerprint_of, audit_of)
    rng = random.Random(20261207)
    differ = 0
    for step in range(8):
        before = [_damage(env.site, rng) for _ in range(rng.randint(0, 2))]
        written = env.root / f"writer-{step}"
        write(written, None)
        sealed = (written / "records.seal").read_bytes()
        after = [_damage(env.site, rng) for _ in range(rng.randint(0, 1))]
        truth = read(None, None)  # no seal, no cache
        differ += sum(len(d["differ"]) if isinstance(d, dict) else len(d.findings) for d in truth.values())
        checked.clear()
        ours = env.root / f"reader-{step}"
        assert read(ours, written / "records.seal") == truth, (before, after)
        assert (written / "records.seal").read_bytes() == sealed  # read, never written
        assert sorted(checked) == sorted({dist for dist, _ in after}), (before, after)  # only those
        for name in set(names()) - set(checked):  # the writer's digests, beside ours
            assert (ours / f"{name}.json").stat().st_ino == (written / f"{name}.json").stat().st_ino
        checked.clear()
        assert read(ours, None) == truth and checked == []  # now its own
    assert differ >= 3  # the corpus made findings, not only clean distributions


def test_a_symlink_in_place_of_the_other_checks_digest_cache_is_not_followed(env, monkeypatch, tmp_path):
    """The digest cache linked beside a taken answer is the other check's own file: a symlink there
    (to any file: here one of this user's, as a cache would be) is not followed or linked."""
    monkeypatch.setattr(statcache.StatCache, "GRANULARITY_NS", -(10**12))
    _own_copies(env.site, [p.name for p in env.site.iterdir() if not p.name.startswith("sglang")])
    from patchkeeper.host.agent import Agent

    names = sorted(p.name for p in env.site.glob("*.dist-info") if "sglang" not in p.name)
    written, ours = env.root / "writer", env.root / "reader"
    Agent().audit_record(str(env.site), names, str(written))
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes((written / f"{names[0]}.json").read_bytes())
    elsewhere.chmod(0o600)
    (written / f"{names[0]}.json").unlink()
    (written / f"{names[0]}.json").symlink_to(elsewhere)
    fingerprint.take(
        [str(env.site)],
        str(ours),
        str(env.site),
        ("distributions",),
        None,
        None,
        str(written / "records.seal"),
    )
    assert not (ours / f"{names[0]}.json").exists() and elsewhere.stat().st_nlink == 1
    assert (ours / f"{names[1]}.json").stat().st_ino == (written / f"{names[1]}.json").stat().st_ino


def test_the_baselines_fingerprint_is_given_the_audits_seals(env, monkeypatch):
    """The path the fingerprint of a target reads the audit's answers from is where the audit seals
    them: after the audit's RECORD check, the target's fingerprint checks no distribution again."""
    monkeypatch.setattr(statcache.StatCache, "GRANULARITY_NS", -(10**12))
    _own_copies(env.site, [p.name for p in env.site.iterdir() if not p.name.startswith("sglang")])
    from patchkeeper import workspace
    from patchkeeper.checks import audit, environment
    from patchkeeper.targets import open_target

    target = open_target(workspace.load(env.root).target(None))
    names = sorted(p.name for p in env.site.glob("*.dist-info") if "sglang" not in p.name)
    target.agent.audit_record(target.info.site, names, audit.cache_dir(target))
    checked = _counted_checks(monkeypatch)
    fp = environment.take(target)
    assert (
        checked == [] and fp["distributions"]["pip"]["differ"] == [] and fp["distributions"]["pip"]["files"]
    )


@pytest.mark.parametrize("state", [False, True])
def test_the_audit_after_a_fingerprint_checks_no_distribution_again_and_status_sees_it(
    env, monkeypatch, state
):
    """The audit of a target reads the fingerprint's RECORD answers where the fingerprint seals them
    (with no state recorded, and with one: its one pass), and the digest caches it links make the
    audit's caches warm for `status`, as an audit that hashed them would."""
    monkeypatch.setattr(statcache.StatCache, "GRANULARITY_NS", -(10**12))
    _own_copies(env.site, [p.name for p in env.site.iterdir() if not p.name.startswith("sglang")])
    if state:
        env.pk("snapshot", "--name", "start", "--manifest-only")
    from patchkeeper import workspace
    from patchkeeper.change.session import Session
    from patchkeeper.checks import audit, environment

    ws = workspace.load(env.root)
    with Session(ws, None, "audit", write=False) as s:
        environment.take(s.target)  # as a change's baseline takes it
        assert not audit.is_warm(s.target)
        checked = _counted_checks(monkeypatch)
        report = audit.audit_target(s.target, s.ledger)
        # no distribution but the managed one, which the fingerprint leaves to the manifests (with no
        # state the audit checks it against its RECORD itself)
        assert checked == ([] if state else ["sglang-0.5.23.dist-info"]) and report.findings == ()
        assert audit.is_warm(s.target)


def test_no_record_verdict_is_sealed_within_the_clock_granularity(env):
    """A fresh copy's files all changed within the granularity: the verdicts are given, never sealed."""
    _take(env)
    seals = distcheck.RecordSeals(str(env.state_dir / "env" / "records.seal"))
    assert seals.seals == {}


def test_the_fingerprint_a_change_records_is_what_the_files_show(baselined):
    """apply and rollback take the fingerprint beside their planning: the one kept with each entry
    shows a new shared object and a removed distribution made just before the command. Other
    distributions are told by their RECORD's identity, their files not read (a change costs no more in
    a venv of 200 distributions): the baseline's fingerprint read them, and audit still finds a hand edit."""
    env = baselined
    env.pk("apply", "ddtree")
    baseline, applied = (
        _entry_env(env, "baseline")["distributions"]["pip"],
        _entry_env(env, "apply")["distributions"]["pip"],
    )
    assert baseline["differ"] == [] and "differ" not in applied and applied["checked"] == "identity"
    assert applied["identity"] == baseline["identity"] and applied["version"] == baseline["version"]
    pip_file = env.site / "pip" / "__init__.py"
    edit_file(pip_file, pip_file.read_bytes() + b"# by hand\n")
    env.pk("rollback", "--to", "baseline")
    assert "differ" not in _entry_env(env, "rollback")["distributions"]["pip"]
    audit = json.loads(env.pk("audit", "--json", check=1).stdout)
    assert any(f["path"] == "pip/__init__.py" and f["class"] == "environment" for f in audit["findings"]), (
        audit
    )
    shutil.copy(_an_elf_object(), env.site / "pip" / "_speedups.so")
    shutil.rmtree(env.site / "setuptools-65.5.0.dist-info")
    env.pk("apply", "ddtree")
    fp = _entry_env(env, "apply")
    assert "pip/_speedups.so" in fp["native"] and "setuptools" not in fp["distributions"]
    assert all(kept for _, kept in fingerprinted(env))


def test_the_package_layout_is_remembered_until_its_files_change(env, monkeypatch):
    """targets/local.py: the package's layout comes back from ~/.cache/patchkeeper with no RECORD
    read while the site dirs, the dist-info dir, RECORD and METADATA keep their identities; a new
    version in METADATA or a RECORD listing another top directory is read again."""
    from patchkeeper import workspace
    from patchkeeper.host.agent import Agent
    from patchkeeper.targets import open_target

    monkeypatch.setattr(statcache.StatCache, "GRANULARITY_NS", -(10**12))
    _own_copies(env.site, ["sglang-0.5.23.dist-info"])
    config = workspace.load(env.root).target(None)
    assert open_target(config).info.version == "0.5.23"
    asked: list[str] = []
    real = Agent.dist_info

    def counting(self, sites, package, paths=True):
        asked.append(package)
        return real(self, sites, package, paths)

    monkeypatch.setattr(Agent, "dist_info", counting)
    Agent_memo = __import__("patchkeeper.host.agent", fromlist=["_DIST_INFOS"])._DIST_INFOS
    Agent_memo.clear()  # this process's memory of answers too: only the cache on disk may answer
    info = open_target(config).info
    assert info.version == "0.5.23" and "sglang" in info.tops and asked == []

    dist = env.site / "sglang-0.5.23.dist-info"
    metadata = dist / "METADATA"
    edit_file(metadata, metadata.read_bytes().replace(b"Version: 0.5.23", b"Version: 0.5.23.post1"))
    assert open_target(config).info.version == "0.5.23.post1" and asked == ["sglang"]
    record = dist / "RECORD"
    edit_file(record, record.read_bytes() + b"sglang_extra/__init__.py,,\n")
    assert "sglang_extra" in open_target(config).info.tops and asked == ["sglang", "sglang"]


def _run(env, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *kw.get("flags", ()), "-m", "patchkeeper", *args], capture_output=True, text=True
    )


def _imports(proc: subprocess.CompletedProcess) -> set[str]:
    return {
        line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")
    }


def test_manifest_text_quotes_as_each_key_alone_would_say():
    """host/manifest_text.write_rows decides with one scan of all keys whether any needs quoting
    (then every ambiguous one is quoted): the same decision as asking each key (_AMBIGUOUS), for a
    quote at the start of the first or a later key, a backslash, a control character, none; and
    the text reads back to the same rows."""
    from patchkeeper.host import manifest_text

    row = ("blake3:" + "0" * 64, 3, 0o644)
    cases = [
        ["a.py", "b/c.py"],
        ['"q.py', "z.py"],
        ["a.py", '"q.py'],
        ["a.py", 'b"q.py'],
        ["a.py", "b\x01.py"],
        ["a.py", "b\x7f.py"],
        ["a.py", "tab\there.py"],
    ]
    for keys in cases:
        rows = {k: row for k in sorted(keys)}
        text = manifest_text.write_rows(rows)
        any_ambiguous = any(manifest_text._AMBIGUOUS.search(k) for k in keys)
        assert (b'"' in text.replace(b'b"q.py', b"")) == any_ambiguous, keys
        assert manifest_text.parse(text) == rows, keys
    # a backslash is written quoted too, but no file key holds one: the reader refuses it (filekeys.py)
    text = manifest_text.write_rows({"a\\b.py": row, "z.py": row})
    assert text.startswith(b"644 3 blake3:" + b"0" * 64 + b' "a\\\\b.py"')
    with pytest.raises(ValueError, match="backslash"):
        manifest_text.parse(text)


def _manifest_text(env) -> bytes:
    from patchkeeper.host.agent import Agent

    entries = [json.loads(p.read_text()) for p in sorted((env.state_dir / "ledger").glob("*.json"))]
    return Agent().store_get(str(env.state_dir / "store"), entries[-1]["after"]["manifest"])


def test_apply_records_the_recorded_manifest_with_its_changes(baselined):
    """plans.Recorded: the state an apply's plan records is the recorded manifest with the plan's
    rows written whole, also where a file name would be quoted or is not ASCII."""
    env = baselined
    from patchkeeper import workspace
    from patchkeeper.change import engine
    from patchkeeper.change.session import Session
    from patchkeeper.host import manifest_text as mt

    for odd in (False, True):
        if odd:
            env.pk("rollback", "--to", "baseline")  # (which removes the file, not in the baseline)
            (env.site / "sglang" / "caf\u00e9.txt").write_bytes(b"odd name\n")
            env.pk("snapshot", "--name", "with-odd")
        else:
            env.pk("snapshot", "--name", "start")
        with Session(workspace.load(env.root), None, "apply ddtree") as s:
            plan = engine.plan_apply(s, "ddtree", force=True)
        assert plan is not None
        recorded = mt.parse(_manifest_text(env))
        for op in plan.ops:
            recorded[op.key] = (op.new.digest, op.new.size, op.new.mode)
        new = mt.write_rows(dict(sorted(recorded.items())))
        assert plan.contents[plan.entry.after.manifest] == new
        assert plan.entry.after.manifest == s.target.hash_bytes(new)
        env.pk("apply", "ddtree", "--force")
