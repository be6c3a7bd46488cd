"""The change path's costs follow what changed: each distribution's RECORD verdict sealed with the
identities of the files it read (host/fingerprint.py), the package's layout remembered across
commands (targets/local.py), the fingerprint taken beside the planning - each never believed over the files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import edit_file, fingerprinted
from patchkeeper.host import disk, distcheck, fingerprint


def _take(env) -> dict:
    state = env.state_dir / "env"
    return fingerprint.take([str(env.site)], str(state), str(env.site), ("distributions", "native"),
                            os.path.join(str(env.site), "sglang-0.5.23.dist-info"))


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


def test_record_verdicts_are_sealed_and_refused_after_any_change_they_read(env, monkeypatch):
    """Each distribution's verdict comes back from its seal, with no RECORD read and no file
    checked, while every file it read keeps its identity; an in-place edit (same size), a file
    replaced by another inode, a rewritten RECORD and a removed distribution are each checked again
    and show."""
    monkeypatch.setattr(disk.StatCache, "GRANULARITY_NS", -10**12)  # seal even this fresh copy
    _own_copies(env.site, [p.name for p in env.site.iterdir() if not p.name.startswith("sglang")])
    pip_file = env.site / "pip" / "__init__.py"
    first = _take(env)
    assert (env.state_dir / "env" / "records.seal").is_file()
    assert first["distributions"]["pip"]["differ"] == [] and first["distributions"]["pip"]["files"] > 100
    assert first["distributions"]["sglang"]["managed"] is True

    checked: list[str] = []
    real = distcheck.check_record

    def counting(site, name, cache_dir):
        checked.append(name)
        return real(site, name, cache_dir)

    monkeypatch.setattr(distcheck, "check_record", counting)
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
    monkeypatch.setattr(disk.StatCache, "GRANULARITY_NS", -10**12)  # seal even this fresh copy
    _own_copies(env.site, [p.name for p in env.site.iterdir() if not p.name.startswith("sglang")])
    from patchkeeper.host.agent import Agent

    names = sorted(p.name for p in env.site.iterdir() if p.name.endswith(".dist-info") and "sglang" not in p.name)
    cache = str(env.state_dir / "audit")
    pip_file = env.site / "pip" / "__init__.py"
    data = pip_file.read_bytes()
    with open(pip_file, "r+b") as f:  # a finding before any seal: it must be sealed with its detail
        f.write(b"#" + data[1:])
    first = Agent().audit_record(str(env.site), names, cache)
    assert (env.state_dir / "audit" / "records.seal").is_file()
    assert [f[:2] for f in first["pip-23.2.1.dist-info"].findings] == [("pip/__init__.py", "changed")]

    checked: list[str] = []
    real = distcheck.check_record
    monkeypatch.setattr(distcheck, "check_record", lambda site, name, cache_dir: checked.append(name)
                        or real(site, name, cache_dir))
    assert Agent().audit_record(str(env.site), names, cache) == first and checked == []

    setuptools_file = env.site / "setuptools" / "__init__.py"
    text = setuptools_file.read_bytes()
    with open(setuptools_file, "r+b") as f:
        f.write(b"#" + text[1:])
    again = Agent().audit_record(str(env.site), names, cache)
    assert checked == ["setuptools-65.5.0.dist-info"]  # only the distribution whose file changed
    assert again["pip-23.2.1.dist-info"] == first["pip-23.2.1.dist-info"]
    assert again["setuptools-65.5.0.dist-info"].findings == (
        ("setuptools/__init__.py", "changed", f"differs from RECORD (sha256, {len(text)} bytes)"),)


def test_no_record_verdict_is_sealed_within_the_clock_granularity(env):
    """A fresh copy's files all changed within the granularity: the verdicts are given, never sealed."""
    _take(env)
    seals = distcheck.RecordSeals(str(env.state_dir / "env" / "records.seal"))
    assert seals.seals == {}


def test_the_fingerprint_a_change_records_is_what_the_files_show(env):
    """apply and rollback take the fingerprint beside their planning (in a second process where
    they can): the one kept with each entry shows a hand edit of another distribution, a new shared
    object and a removed distribution made just before the command."""
    env.pk("apply", "ddtree")
    assert _entry_env(env, "apply")["distributions"]["pip"]["differ"] == []
    pip_file = env.site / "pip" / "__init__.py"
    edit_file(pip_file, pip_file.read_bytes() + b"# by hand\n")
    env.pk("rollback", "--to", "baseline")
    assert _entry_env(env, "rollback")["distributions"]["pip"]["differ"] == [["pip/__init__.py", "changed"]]
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

    monkeypatch.setattr(disk.StatCache, "GRANULARITY_NS", -10**12)
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
    return subprocess.run([sys.executable, *kw.get("flags", ()), "-m", "patchkeeper", *args],
                          capture_output=True, text=True)


def _imports(proc: subprocess.CompletedProcess) -> set[str]:
    return {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}


def test_a_forked_computation_hashes_big_files_after_blake3s_threads_ran(tmp_path):
    """disk.fork_call after blake3's own thread pool hashed a big file here: a fork does not copy
    those native threads, so the child hashes on its calling thread instead of waiting on them
    for ever (the guard below only ends a child that would)."""
    if disk.cpus() < 2:
        pytest.skip("fork_call forks only where a second CPU can run the child")
    code = ("import os, sys\nfrom patchkeeper.host import disk\nbig = sys.argv[1]\n"
            "open(big, 'wb').write(os.urandom(disk._BIG + 1))\nsize = os.path.getsize(big)\n"
            "here = disk.hash_file(big, size)\nfinish = disk.fork_call(lambda: disk.hash_file(big, size))\n"
            "print(finish is not None and finish() == here)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "big")], capture_output=True, text=True,
                          timeout=300)
    assert proc.stdout.strip() == "True", proc.stderr[-2000:]


_SPLIT_SCAN = '''
import json, marshal, os, shutil, sys
from dataclasses import replace
from patchkeeper.host import agent, disk
from patchkeeper.host.contract import ScanRequest

def busy(*answers):  # what disk.busy says, look after look (then: idle), as split_when_idle and fork_half ask it
    left = list(answers)
    disk.busy = lambda: left.pop(0) if left else False

disk.StatCache.GRANULARITY_NS = -10**12  # remember even these freshly copied files
busy()  # as on an idle machine (the test runner's other workers may keep every CPU busy)
site, work, edited = sys.argv[1], sys.argv[2], sys.argv[3:]
request = ScanRequest(site, (), ("sglang",), os.path.join(work, "one", "statcache"))
before = agent.Agent().scan(request).rows  # a cold scan: the stat cache is written
for copy in ("two", "three", "four"):
    shutil.copytree(os.path.join(work, "one"), os.path.join(work, copy))
for key in edited:  # by hand, in place: same size, same mtime, the same inode (its ctime alone moves)
    path = os.path.join(site, key)
    st = os.stat(path)
    with open(path, "r+b") as f:
        first = f.read(1)
        f.seek(0)
        f.write(b"#" if first != b"#" else b"%")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
forks = []
fork_half = disk.fork_half
disk.fork_half = lambda fn, items, half: forks.append((len(items), fork_half(fn, items, half))) or forks[-1][1]
scans = {"split": agent.Agent().scan(request).rows}
busy(*[True] * 100)  # every CPU taken all along (as while the fingerprint's process works): not split
scans["busy"] = agent.Agent().scan(replace(request, cache=os.path.join(work, "three", "statcache"))).rows
busy(True, True, True)  # a CPU idle after three looks: what is left then is split
scans["later"] = agent.Agent().scan(replace(request, cache=os.path.join(work, "four", "statcache"))).rows
disk.allow_split(False)
scans["serial"] = agent.Agent().scan(replace(request, cache=os.path.join(work, "two", "statcache"))).rows
caches = [marshal.loads(open(os.path.join(work, d, "statcache"), "rb").read())[1] for d in ("one", "two", "three", "four")]
print(json.dumps({"forks": [(n, f is not None) for n, f in forks], "same": all(v == scans["serial"] for v in scans.values()),
                  "caches": all(c == caches[0] for c in caches), "files": len(scans["split"]),
                  "differ": sorted(k for k in before if before[k] != scans["split"].get(k))}))
'''


def test_a_scan_split_over_two_processes_finds_what_one_process_finds(env, tmp_path):
    """A scan with no bytecode check after it (a rollback's comparison), its files known to the stat
    cache: a forked process lstats the second half of them, beside this one, unless every CPU is
    taken, or of what is left once one is idle. Its answer and the stat cache it leaves are those
    of one process alone, and a file edited in place in either half, with its size and mtime kept,
    is found by both."""
    if disk.cpus() < 2:
        pytest.skip("fork_call forks only where a second CPU can run the child")
    keys = list(disk.walk_files(str(env.site), "sglang"))  # the scan's order; halves of about equal work
    edited = [keys[10], keys[len(keys) // 2 - 10], keys[len(keys) // 2 + 10], keys[-10]]
    for key in edited:
        edit_file(env.site / key, (env.site / key).read_bytes())  # an inode of our own (the copy is of hardlinks)
    proc = subprocess.run([sys.executable, "-c", _SPLIT_SCAN, str(env.site), str(tmp_path), *edited],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout)
    # the warm scan forked at once; not while busy; three chunks later once a CPU was idle; neither with the
    # split off nor the cold one (nothing known to its stat cache: its files to hash are split by size) asked
    assert found["forks"] == [[len(keys), True], [len(keys) - 3 * disk.IDLE_CHUNK, True]]
    assert found["same"] and found["caches"] and found["files"] == len(keys)
    assert found["differ"] == sorted(edited)


_BESIDE = '''
import json, os, sys
from pathlib import Path
from patchkeeper import environment, workspace
from patchkeeper.host import disk
from patchkeeper.change.session import Session

disk.StatCache.GRANULARITY_NS = -10**12  # seal even this fresh copy's RECORD checks
disk.SPLIT_AT = 64  # the test venv's other distributions list some 1,500 files, not torch's 15,000
disk.busy = lambda: False  # as when the command has planned and waits
log = sys.argv[2]
fork_half = disk.fork_half

def counted(fn, items, half=None):
    forked = fork_half(fn, items, half)
    if forked is not None:
        with open(log, "a") as f:
            f.write(f"{os.getpid()} {len(items)}\\n")
    return forked

disk.fork_half = counted
with Session(workspace.load(Path(sys.argv[1])), None, "test") as s:
    disk.allow_split(False)
    here = environment.take(s.target)  # in this process, unsplit: the seals are written
    again = environment.take(s.target)  # from the seals, still unsplit
    disk.allow_split(True)
    beside = environment.Taking(s.target, None)
    forked = beside._child is not None
    beside._take()
print(json.dumps({"forked": forked, "same": here == again == beside._doc, "parent": os.getpid()}))
'''


def test_the_fingerprint_beside_the_planning_splits_its_work_once_a_cpu_is_idle(env, tmp_path):
    """environment.Taking's forked process (which, as any child of fork_call, would split nothing)
    splits its own long list, the identities of every file of the other distributions, with a
    process of its own once a CPU is idle (when the command has planned and waits): the same
    fingerprint as one process takes."""
    if disk.cpus() < 2:
        pytest.skip("fork_call forks only where a second CPU can run the child")
    log = tmp_path / "forks"
    proc = subprocess.run([sys.executable, "-c", _BESIDE, str(env.root), str(log)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    found = json.loads(proc.stdout)
    assert found["forked"] and found["same"]
    forks = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
    assert forks and all(pid != str(found["parent"]) for pid, _ in forks)  # in the fingerprint's process only


def test_manifest_text_quotes_as_each_key_alone_would_say():
    """host/manifest_text.write_rows decides with one scan of all keys whether any needs quoting
    (then every ambiguous one is quoted): the same decision as asking each key (_AMBIGUOUS), for a
    quote at the start of the first or a later key, a backslash, a control character, none; and
    the text reads back to the same rows."""
    from patchkeeper.host import manifest_text

    row = ("blake3:" + "0" * 64, 3, 0o644)
    cases = [["a.py", "b/c.py"], ['"q.py', "z.py"], ["a.py", '"q.py'], ["a.py", 'b"q.py'], ["a\\b.py", "z.py"],
             ["a.py", "b\x01.py"], ["a.py", "b\x7f.py"], ["a.py", "tab\there.py"]]
    for keys in cases:
        rows = {k: row for k in sorted(keys)}
        text = manifest_text.write_rows(rows)
        any_ambiguous = any(manifest_text._AMBIGUOUS.search(k) for k in keys)
        assert (b'"' in text.replace(b'b"q.py', b"")) == any_ambiguous, keys
        assert manifest_text.parse(text) == rows, keys


def _manifest_text(env) -> bytes:
    from patchkeeper.host.agent import Agent

    entries = [json.loads(p.read_text()) for p in sorted((env.state_dir / "ledger").glob("*.json"))]
    return Agent().store_get(str(env.state_dir / "store"), entries[-1]["after"]["manifest"])


def test_a_plan_splices_the_recorded_text_as_writing_it_whole_would(env):
    """manifest_text.lines/lookup/splice: a plan reads the recorded entries of the keys it touches and
    writes its new manifest from the recorded text alone, byte for byte what parsing the whole manifest
    and writing it again gives (random changes to the real sglang manifest: rows changed, removed, and
    added before, between and after the others); a text whose lines could be written otherwise (a
    quoted key, a non-ASCII one, an install record) or a change to such a key is refused (None)."""
    import random

    from patchkeeper.host import manifest_text as mt

    env.pk("snapshot", "--name", "start")
    text = _manifest_text(env)
    rows = mt.parse(text)
    found = mt.lines(text)
    assert found is not None and len(found) == len(rows) > 5000
    keys = list(rows)
    rnd = random.Random(11)
    for _ in range(150):
        changes: dict = {k: None if rnd.random() < 0.3 else (f"blake3:{rnd.getrandbits(256):064x}", rnd.randint(0, 9), 0o755)
                         for k in rnd.sample(keys, 6)}
        for _ in range(4):  # new keys, wherever they sort
            base = rnd.choice(keys + ["", "~"])
            changes[base[:rnd.randint(0, len(base))] + rnd.choice(["a", "~z", "/x.py", " y", "0"])] = ("blake3:" + "0" * 64, 1, 0o644)
        whole = dict(rows)
        for k, row in changes.items():
            if row is None:
                whole.pop(k, None)
            else:
                whole[k] = row
        assert mt.splice(found, changes) == mt.write_rows(dict(sorted(whole.items())))
        assert mt.lookup(found, list(changes)) == {k: rows.get(k) for k in changes}
    for odd in ('sglang/"quoted".py', "sglang/caf\u00e9.py", "sglang/back\\slash.py", "x-1.0.dist-info/RECORD"):
        assert mt.lines(mt.write_rows(dict(sorted({**rows, odd: ("blake3:" + "1" * 64, 1, 0o644)}.items())))) is None
        assert mt.splice(found, {odd: ("blake3:" + "1" * 64, 1, 0o644)}) is None


def test_apply_plans_from_the_recorded_text_and_from_the_whole_manifest_alike(env, monkeypatch):
    """engine.Recorded: apply's plan reads no whole manifest where the recorded text can be spliced, and
    the whole one where it cannot (a non-ASCII file name in the package); the state recorded is the
    one writing the whole manifest gives."""
    from patchkeeper.change import engine
    from patchkeeper import workspace
    from patchkeeper.host import manifest_text as mt
    from patchkeeper.records.ledger import Ledger
    from patchkeeper.change.session import Session

    loaded = []
    whole = Ledger.load_manifest
    monkeypatch.setattr(Ledger, "load_manifest", lambda self, state: loaded.append(state.id) or whole(self, state))
    for odd in (False, True):
        if odd:
            env.pk("rollback", "--to", "baseline")  # (which removes the file, not in the baseline)
            (env.site / "sglang" / "caf\u00e9.txt").write_bytes(b"odd name\n")
            env.pk("snapshot", "--name", "with-odd")  # a recorded state whose text cannot be spliced
        else:
            env.pk("snapshot", "--name", "start")
        loaded.clear()
        with Session(workspace.load(env.root), None, "apply ddtree") as s:
            plan = engine.plan_apply(s, "ddtree", force=True)
        assert plan is not None
        assert loaded == ([s.ledger.current().id] if odd else [])
        recorded = mt.parse(_manifest_text(env))
        for op in plan.ops:
            recorded[op.key] = (op.new.digest, op.new.size, op.new.mode)
        new = mt.write_rows(dict(sorted(recorded.items())))
        assert plan.contents[plan.entry.after.manifest] == new
        assert plan.entry.after.manifest == s.target.hash_bytes(new)
        env.pk("apply", "ddtree", "--force")


def test_a_manifest_near_one_read_already_is_cached_as_its_changes(env, monkeypatch):
    """host/manifests.py: a rollback reads the state it leaves and the one it goes to; the one that
    differs in a few rows from the other (cached whole) is cached as those rows (*.over), and read
    back, by a new agent, as the other's rows with them, without parsing its text; never believed
    over its object (rewritten: parsed again), nor when damaged, nor without the other's rows."""
    from patchkeeper.host import manifest_text as mt
    from patchkeeper.host import manifests
    from patchkeeper.host.agent import Agent

    env.pk("snapshot", "--name", "start")
    env.pk("apply", "ddtree")
    entries = [json.loads(p.read_text()) for p in sorted((env.state_dir / "ledger").glob("*.json"))]
    base, applied = entries[0]["after"]["manifest"], entries[-1]["after"]["manifest"]
    store, cache = str(env.state_dir / "store"), env.state_dir / "manifest-cache"
    for p in cache.iterdir() if cache.exists() else ():  # (apply reads no whole manifest: see above)
        p.unlink()
    text = Agent().store_get(store, applied)
    agent = Agent()
    assert agent.manifest_rows(store, base) != agent.manifest_rows(store, applied) == mt.parse(text)
    over = cache / (applied.replace(":", "-") + ".over")
    whole = cache / (base.replace(":", "-") + ".rows")
    assert over.exists() and not over.with_suffix(".rows").exists() and 20 * over.stat().st_size < whole.stat().st_size

    def unparsed(data):
        raise AssertionError("parsed")

    with monkeypatch.context() as m:
        m.setattr(manifests, "parse", unparsed)
        assert Agent().manifest_rows(store, applied) == mt.parse(text)  # the base's cache, and the changes
    whole.unlink()  # without the other's cache: the other is parsed, and the changes still serve
    assert Agent().manifest_rows(store, applied) == mt.parse(text)
    over.write_bytes(over.read_bytes()[:100])  # damaged: parsed, and cached again
    assert Agent().manifest_rows(store, applied) == mt.parse(text)
    algo, _, hexd = applied.partition(":")
    obj = env.state_dir / "store" / "objects" / algo / hexd[:2] / hexd[2:]
    data = obj.read_bytes()  # the object rewritten (same bytes, a new file): its cache is not believed
    obj.unlink()
    obj.write_bytes(data)
    with monkeypatch.context() as m:
        m.setattr(manifests, "parse", unparsed)
        with pytest.raises(AssertionError, match="parsed"):
            Agent().manifest_rows(store, applied)
    assert Agent().manifest_rows(store, applied) == mt.parse(text)
    env.pk("rollback", "--to", "baseline")
