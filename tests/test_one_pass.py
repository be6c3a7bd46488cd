"""One pass over the tree (host/agent.py scan, host/distcheck.py): the scan's walk also yields the
bytecode, so the bytecode check walks none of the package's directories again and judges each pyc
by the stat the scan took; and recorded manifests come from a versioned cache beside the store,
never believed over the stored object it was made from."""

from __future__ import annotations

import json
import os
import py_compile
import sys
from pathlib import Path

import pytest

from conftest import edit_file
from patchkeeper.host import agent as agent_module
from patchkeeper.host.agent import Agent
from patchkeeper.host.contract import ScanRequest
from patchkeeper.host.errors import AgentError

TAG = f"cpython-{sys.version_info.major}{sys.version_info.minor}"


def _bytecode_cases(site):
    """A pyc running other code (unchecked hash) inside the package and outside it, and a legacy one."""
    other = site / "other_source.py"
    other.write_text("print('not the real module')\n")
    inside = site / "sglang" / "__pycache__" / f"version.{TAG}.pyc"
    inside.parent.mkdir(exist_ok=True)
    py_compile.compile(str(other), cfile=str(inside), invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    py_compile.compile(str(other), cfile=str(site / "sglang" / "legacy.pyc"))
    (site / "outside").mkdir()
    (site / "outside" / "mod.py").write_text("X = 1\n")
    outside = site / "outside" / "__pycache__" / f"mod.{TAG}.pyc"
    outside.parent.mkdir()
    py_compile.compile(str(other), cfile=str(outside), invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    other.unlink()


def test_bytecode_check_reuses_the_scan_walk_and_finds_the_same(env, monkeypatch):
    site = str(env.site)
    _bytecode_cases(env.site)
    full = Agent().audit_bytecode(site, TAG, [], None)  # no scan before it: walks everything itself
    kinds = {rel: kind for rel, kind, _ in full.findings}
    assert kinds == {f"sglang/__pycache__/version.{TAG}.pyc": "mismatch", "sglang/legacy.pyc": "sourceless",
                     f"outside/__pycache__/mod.{TAG}.pyc": "mismatch"}

    agent = Agent()
    agent.scan(ScanRequest(root=site, walk=("sglang",), bytecode=True))
    listed: list[str] = []
    real_scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path=".": listed.append(str(path)) or real_scandir(path))
    again = agent.audit_bytecode(site, TAG, [], None)
    monkeypatch.undo()
    assert again == full
    assert listed and not [p for p in listed if p.startswith(f"{site}/sglang")], "the package was walked twice"
    assert any(p.startswith(f"{site}/outside") for p in listed)  # the rest of site-packages still is


def test_manifests_come_from_their_cache_and_never_over_the_stored_object(env, monkeypatch):
    env.pk("snapshot", "--name", "s0")
    digest = json.loads(env.pk("status", "--json").stdout)["state"]["manifest"]
    store = str(env.state_dir / "store")
    rows = Agent().manifest_rows(store, digest)
    assert len(rows) > 5000 and list((env.state_dir / "manifest-cache").iterdir())

    def no_parsing(data: bytes) -> dict:
        raise AssertionError("manifest text parsed")

    monkeypatch.setattr(agent_module, "manifest_rows", no_parsing)
    assert Agent().manifest_rows(store, digest) == rows  # a warm read parses no text
    env.pk("audit", "-q")

    # the stored object is rewritten (same bytes, new file): the cache no longer describes it
    algo, _, hexd = digest.partition(":")
    obj = env.state_dir / "store" / "objects" / algo / hexd[:2] / hexd[2:]
    data = obj.read_bytes()
    obj.unlink()
    obj.write_bytes(data)
    with pytest.raises(AssertionError, match="manifest text parsed"):
        Agent().manifest_rows(store, digest)
    monkeypatch.undo()
    assert Agent().manifest_rows(store, digest) == rows  # parsed again, and cached again

    obj.unlink()
    obj.write_bytes(data.replace(b"sglang/", b"sglanX/", 1))  # a corrupt object is an error, cache or not
    with pytest.raises(AgentError) as exc:
        Agent().manifest_rows(store, digest)
    assert exc.value.kind == "corrupt-object"


def _scanned(env, monkeypatch) -> tuple[str, str, Path, ScanRequest, dict]:
    """A scan of the package with a stat cache that remembers every file (even this fresh copy), one
    file of which (returned: its key and path) is an inode of our own, to be edited in place."""
    from patchkeeper.host import disk

    rel = "sglang/version.py"
    path = env.site / rel
    edit_file(path, path.read_bytes())  # an inode of our own: the edit below is in place
    monkeypatch.setattr(disk.StatCache, "GRANULARITY_NS", -10**12)
    request = ScanRequest(root=str(env.site), walk=("sglang",), cache=str(env.state_dir / "statcache.json"))
    return rel, str(request.cache), path, request, Agent().scan(request).rows


def _edit_in_place(path: Path) -> None:
    """Change a byte of the file in place, its size and mtime kept, in a later tick of the clock (its
    ctime alone moves, as a careful hand edit leaves it)."""
    before = path.stat()
    data = path.read_bytes()
    edited = data.replace(b"0", b"9", 1) if b"0" in data else data[:-1] + b"#"
    assert len(edited) == len(data) and edited != data
    while path.stat().st_ctime_ns == before.st_ctime_ns:
        with open(path, "r+b") as f:
            f.write(edited)
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_stat_cache_is_never_believed_over_the_file(env, monkeypatch):
    """The scan's stat cache (marshal, stamped): a file edited in place with its size and mtime kept
    is hashed again (its ctime moved); a cache in another format or of another Python is ignored."""
    from patchkeeper.host import disk

    rel, cache, path, request, first = _scanned(env, monkeypatch)
    assert disk.StatCache(cache).entries[rel][4] == first[rel][0]  # remembered, by stat identity
    _edit_in_place(path)
    again = Agent().scan(request).rows
    assert again[rel][0] != first[rel][0] and again[rel][0] == disk.hash_file(str(path))

    # a cache file that is not ours (the old JSON form, another stamp) is empty, never misread
    for foreign in (b'{"sglang/version.py": [1, 2, 3, 4, "blake3:00"]}',
                    __import__("marshal").dumps((("pk-statcache", 1, (3, 0)), {rel: (0, 0, 0, 0, "x")}))):
        with open(cache, "wb") as f:
            f.write(foreign)
        assert disk.StatCache(cache).entries == {}
    assert Agent().scan(request).rows == again


def test_stat_cache_is_written_only_when_it_learned_something(env, monkeypatch):
    """The scan's stat cache is rewritten when a scan remembered a file it did not know, not when
    it only found a few known files changed and too fresh to remember (what a rollback finds right
    after an apply); the entries kept for those are never believed: the files' identities moved."""
    from patchkeeper.host import disk

    rel, cache, path, request, first = _scanned(env, monkeypatch)
    written = os.stat(cache)
    assert Agent().scan(request).rows == first and os.stat(cache).st_ino == written.st_ino  # nothing new
    _edit_in_place(path)
    monkeypatch.setattr(disk.StatCache, "GRANULARITY_NS", 10**15)  # now nothing is old enough to remember
    for _ in range(2):
        again = Agent().scan(request).rows
        assert again[rel][0] == disk.hash_file(str(path)) != first[rel][0]  # the kept entry is not believed
        assert {k for k in first if first[k] != again[k]} == {rel}
        assert os.stat(cache).st_ino == written.st_ino and disk.StatCache(cache).entries[rel][4] == first[rel][0]

    monkeypatch.setattr(disk.StatCache, "GRANULARITY_NS", -10**12)
    assert Agent().scan(request).rows == again
    assert disk.StatCache(cache).entries[rel][4] == again[rel][0]  # learned: written


def test_differences_of_rows_and_of_entries_agree():
    """Manifests made from rows compare by rows first; rows that differ only in type still agree."""
    from patchkeeper.manifest import Entry, Manifest, differences

    rows = {"a": ["blake3:1", 1, 0o644], "b": ["blake3:2", 2, 0o644], "c": ["blake3:3", 3, 0o644]}
    same = Manifest.from_scan(rows)
    assert differences(same, Manifest.from_scan(dict(rows))) == {}
    assert differences(same, Manifest.from_scan({k: tuple(v) for k, v in rows.items()})) == {}  # tuples, not lists
    assert differences(same, Manifest({k: Entry.of(v) for k, v in rows.items()})) == {}
    other = Manifest.from_scan({"a": ["blake3:1", 1, 0o755], "b": ["blake3:9", 2, 0o644], "d": ["blake3:4", 4, 0o644]})
    assert differences(same, other) == {"a": "mode", "b": "changed", "c": "removed", "d": "added"}
    assert dict(other) == {"a": Entry("blake3:1", 1, 0o755), "b": Entry("blake3:9", 2, 0o644),
                           "d": Entry("blake3:4", 4, 0o644)} and "c" not in other and len(other) == 3
    # rows stay rows through replace and the text form, which is the one Entries give
    changes = {"a": None, "e": Entry("blake3:5", 5, 0o600), "b": Entry("blake3:6", 2, 0o644)}
    as_entries = Manifest({k: Entry.of(v) for k, v in rows.items()})
    assert same.replace(changes).to_text() == as_entries.replace(changes).to_text()
    assert dict(same.replace(changes)) == dict(as_entries.replace(changes))
    assert Manifest.from_text(same.to_text()).to_text() == as_entries.to_text()


def test_a_remembered_directory_listing_is_never_believed_over_the_directory(env, monkeypatch):
    """The scan remembers each walked directory's entries by the directory's stat identity: a file
    added (or removed) in the same directory later is found, because the directory changed."""
    from patchkeeper.host import disk

    site, cache = str(env.site), str(env.state_dir / "statcache.json")
    monkeypatch.setattr(disk.StatCache, "GRANULARITY_NS", -10**12)  # remember even this fresh copy
    request = ScanRequest(root=site, walk=("sglang",), cache=cache)
    first = Agent().scan(request).rows
    lang = env.site / "sglang" / "lang"
    assert str(lang) in disk.StatCache(cache + ".dirs").entries  # remembered

    listed: list[str] = []
    real_scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path=".": listed.append(str(path)) or real_scandir(path))
    assert Agent().scan(request).rows == first and listed == []  # a warm walk lists no directory again

    before = lang.stat()
    n = 0
    while lang.stat().st_ctime_ns == before.st_ctime_ns:  # the change must land in a later tick of the clock
        (lang / f"added_{n}.py").write_text("X = 1\n")
        n += 1
    again = Agent().scan(request).rows
    assert listed == [str(lang)]  # only the changed directory is listed again
    assert {k for k in again if k not in first} == {f"sglang/lang/added_{i}.py" for i in range(n)}
    for i in range(n):
        (lang / f"added_{i}.py").unlink()
    assert Agent().scan(request).rows == first


def test_only_big_files_are_hashed_on_threads_and_answers_keep_their_order():
    """Small files are hashed in the calling thread (on threads they cost twice the CPU); big ones on threads."""
    import threading

    from patchkeeper.host.disk import BIG_FILE, map_files

    jobs = [(i, BIG_FILE if i % 3 == 0 else 100) for i in range(9)]
    ran_on: dict[int, int] = {}

    def fn(job):
        ran_on[job[0]] = threading.get_ident()
        return job[0] * 2

    assert map_files(fn, jobs, lambda job: job[1], 4) == [i * 2 for i in range(9)]
    here = threading.get_ident()
    assert all(ran_on[i] == here for i in range(9) if i % 3)
    assert all(ran_on[i] != here for i in range(0, 9, 3))


def test_a_sealed_audit_is_given_again_only_while_nothing_it_read_has_changed(env, monkeypatch):
    """host/seal.py: once the stat cache exists, audit_tree seals its answer with the identity of
    every entry it read; while all are unchanged the answer comes back with nothing else read, and
    any change (an in-place edit keeping size and mtime, a new pyc, a mode, a removal, a role file)
    is audited in full and found."""
    from patchkeeper.host import disk, seal
    from patchkeeper.host.contract import TreeRequest

    env.pk("snapshot", "--name", "s0")
    digest = json.loads(env.pk("status", "--json").stdout)["state"]["manifest"]
    site, state = env.site, env.state_dir
    unit = env.unit
    edit_file(unit, unit.read_bytes())  # an inode of our own: edited in place below
    monkeypatch.setattr(disk.StatCache, "GRANULARITY_NS", -10**12)  # seal even this fresh copy
    sealed_at = str(state / "audit" / "tree.seal")
    for cache in state.glob("statcache.json*"):
        cache.unlink()
    from patchkeeper import workspace
    from patchkeeper.scan import scan_request
    from patchkeeper.targets import open_target

    target = open_target(workspace.load(env.root).target(None))
    scan = scan_request(target)  # the package's RECORD paths, its top directories, the unit file
    assert scan.absolute == {"@unit": str(unit)} and "sglang" in scan.walk
    request = TreeRequest(str(state / "store"), digest, scan, TAG, (), str(state / "audit" / "bytecode.cache"),
                          sealed_at)
    first = Agent().audit_tree(request)
    assert not os.path.exists(sealed_at)  # a cold audit (no stat cache yet) pays for no seal
    assert first.files > 5000 and first.bytecode.pycs > 5000 and first.comparison.pairs == {}
    clean = Agent().audit_tree(request)
    assert clean == first and os.path.exists(sealed_at)

    def nothing_else(*args, **kwargs):
        raise AssertionError("read past the seal")

    with monkeypatch.context() as m:
        for name in ("check_bytecode", "manifest_rows", "hash_file", "walk_files"):
            m.setattr(agent_module, name, nothing_else)
        assert Agent().audit_tree(request) == clean  # from the seal alone
        assert seal.load(sealed_at, "another key") is None
        algo, _, hexd = digest.partition(":")  # the stored manifest rewritten (same bytes, a new file):
        obj = state / "store" / "objects" / algo / hexd[:2] / hexd[2:]  # the seal is not believed over it
        data = obj.read_bytes()
        obj.unlink()
        obj.write_bytes(data)
        with pytest.raises(AssertionError, match="read past the seal"):
            Agent().audit_tree(request)
    assert Agent().audit_tree(request) == clean  # read in full, and sealed again

    version = site / "sglang" / "version.py"
    edit_file(version, version.read_bytes())
    Agent().audit_tree(request)  # sealed again over the new inode
    before, data = version.stat(), version.read_bytes()
    edited = data.replace(b"0", b"9", 1) if b"0" in data else data[:-1] + b"#"
    while version.stat().st_ctime_ns == before.st_ctime_ns:  # same size and mtime, a later ctime
        with open(version, "r+b") as f:
            f.write(edited)
        os.utime(version, ns=(before.st_atime_ns, before.st_mtime_ns))
    found = Agent().audit_tree(request)
    assert set(found.comparison.pairs) == {"sglang/version.py"}
    edit_file(version, data)
    os.utime(version, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert Agent().audit_tree(request).comparison.pairs == {}

    stray = site / "sglang" / "srt" / "zz_stray.pyc"  # a legacy pyc without its source: Python imports it
    py_compile.compile(str(version), cfile=str(stray))
    assert [f[:2] for f in Agent().audit_tree(request).bytecode.findings] == [("sglang/srt/zz_stray.pyc", "sourceless")]
    stray.unlink()
    assert Agent().audit_tree(request).bytecode.findings == ()

    init = site / "sglang" / "__init__.py"
    mode = init.stat().st_mode
    edit_file(init, init.read_bytes())
    init.chmod(0o600)
    assert {k: (old[2], new[2]) for k, (old, new) in Agent().audit_tree(request).comparison.pairs.items()} == \
        {"sglang/__init__.py": (mode & 0o777, 0o600)}
    init.chmod(mode & 0o777)

    removed = next((site / "sglang" / "srt").glob("*.py"))
    saved = removed.read_bytes()
    removed.unlink()
    assert {k: new for k, (_, new) in Agent().audit_tree(request).comparison.pairs.items()} == \
        {str(removed.relative_to(site)): None}
    removed.write_bytes(saved)

    with open(unit, "ab") as f:
        f.write(b"# by hand\n")
    assert set(Agent().audit_tree(request).comparison.pairs) >= {"@unit"}


def test_no_seal_is_written_within_the_clock_granularity_of_a_change(env):
    """A tree changed less than the timestamp granularity ago is never sealed: an edit in the same
    tick could leave every identity as it was (the racily-clean rule)."""
    from patchkeeper.host import seal

    sealed = seal.entries(str(env.site), ("sglang",), [])  # a fresh hardlinked copy: every ctime is new
    assert sealed is None
    assert seal.entries(str(env.site / "nowhere"), ("sglang",), []) is None


def test_identities_split_over_two_processes_are_the_serial_ones(env, monkeypatch):
    """seal.identities: a long list is split with a forked second process; the bytes are those of the
    serial loop, absent paths included, and a fork that fails leaves this process to do it all."""
    from patchkeeper.host import seal

    paths = [str(p) for p in sorted(env.site.rglob("*"))][:6000]
    paths[10:10] = [str(env.site / "no such file"), str(env.site / "sglang" / "nowhere" / "x.py")]
    from patchkeeper.host import disk

    assert len(paths) >= disk.SPLIT_AT
    serial = seal.stat_identities(paths)
    calls = []
    real_fork = os.fork
    monkeypatch.setattr(os, "fork", lambda: calls.append(1) or real_fork())
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(disk, "alone", lambda: True)  # a test runner's worker has threads of its own
    monkeypatch.setattr(disk, "busy", lambda: False)  # nor may the other workers keep every CPU busy
    assert seal.identities(paths) == serial and calls == [1]

    def no_fork():
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(os, "fork", no_fork)
    assert seal.identities(paths) == serial
    assert seal.identities(paths[:100]) == seal.stat_identities(paths[:100])  # short lists stay here


def test_no_work_is_split_while_every_cpu_is_taken(monkeypatch, tmp_path):
    """busy reads the runnable tasks of Linux's loadavg against this process's CPUs; while they are
    all taken, a long list stays in this process (a fork would only add its cost), else it is split."""
    from patchkeeper.host import disk, seal

    cpus = len(os.sched_getaffinity(0))
    loadavg = tmp_path / "loadavg"
    loadavg.write_text(f"3.10 2.05 1.40 {cpus}/312 40211\n")
    assert disk.busy(str(loadavg))
    loadavg.write_text(f"0.10 0.05 0.01 {cpus - 1}/312 40211\n")
    assert not disk.busy(str(loadavg))
    assert not disk.busy(str(tmp_path / "absent"))  # not Linux: cannot be told, never busy

    paths = [str(tmp_path / f"f{i}") for i in range(disk.SPLIT_AT)]
    forks: list[int] = []
    real_fork = os.fork
    monkeypatch.setattr(os, "fork", lambda: forks.append(1) or real_fork())
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(disk, "alone", lambda: True)  # a test runner's worker has threads of its own
    monkeypatch.setattr(disk, "busy", lambda: True)
    assert seal.identities(paths) == seal.stat_identities(paths) and forks == []
    monkeypatch.setattr(disk, "busy", lambda: False)
    assert seal.identities(paths) == seal.stat_identities(paths) and forks == [1]


def test_many_small_files_are_split_with_a_forked_process_and_keep_their_order(monkeypatch, tmp_path):
    """map_files(pure=True): half of many small jobs go to a forked process, started before the big
    files' threads; answers keep their order; an error in the child's half is raised here, as it
    would have been; side effects stay with the caller (the stat cache is remembered after)."""
    from patchkeeper.host import disk

    monkeypatch.setattr(disk, "alone", lambda: True)  # a test runner's worker has threads of its own
    monkeypatch.setattr(disk, "busy", lambda: False)  # nor may the other workers keep every CPU busy
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    pids: list[int] = []
    real_fork = os.fork
    monkeypatch.setattr(os, "fork", lambda: pids.append(1) or real_fork())
    n = disk.SPLIT_AT + 10
    jobs = [(i, disk.BIG_FILE if i in (5, n - 1) else 10) for i in range(n)]
    ran: list[int] = []

    def fn(job):
        ran.append(os.getpid())
        return (job[0], os.getpid())

    out = disk.map_files(fn, jobs, lambda job: job[1], 4, pure=True)
    assert [i for i, _ in out] == list(range(n)) and pids == [1]
    assert len({pid for _, pid in out}) == 2  # two processes did the work
    assert len(ran) < n  # the child's calls happened elsewhere

    missing = tmp_path / "gone"

    def reads(job):
        if job[0] == n - 5:  # in the child's half
            return missing.read_bytes()
        return job[0]

    with pytest.raises(FileNotFoundError):
        disk.map_files(reads, jobs, lambda job: job[1], 4, pure=True)
    assert disk.map_files(lambda job: job[0], jobs, lambda job: job[1], 4) == list(range(n))  # not pure: no fork
    assert pids == [1, 1]


def _same_tick_edits(site, count):
    """`count` sources, spread over the package, edited keeping their size and mtime: the headers of
    their (timestamp) pycs still match, so only a recompile shows that the pyc runs other code."""
    candidates = []
    for pyc in sorted((site / "sglang").rglob(f"__pycache__/*.{TAG}.pyc")):
        src = pyc.parent.parent / (pyc.name.split(".")[0] + ".py")
        head = pyc.read_bytes()[:16]
        if not src.is_file() or int.from_bytes(head[4:8], "little") or src.stat().st_size < 8:
            continue
        st = src.stat()
        stamped = (int.from_bytes(head[8:12], "little"), int.from_bytes(head[12:16], "little"))
        if stamped == (int(st.st_mtime), st.st_size):
            candidates.append((src, pyc))
    picked = candidates[:: max(1, len(candidates) // count)][:count]
    for src, _ in picked:
        st, data = src.stat(), src.read_bytes()
        edit_file(src, b"x=1\n" + data[:-4])  # other code (or none that compiles), of the same size
        os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    return [(str(src.relative_to(site)), str(pyc.relative_to(site))) for src, pyc in picked]


def test_a_cold_audit_split_over_two_processes_gives_the_one_process_answer(env, monkeypatch):
    """audit_tree over many files: a forked process digests half of the files and judges half of the
    pycs while this one does the rest (one fork, where a scan and a bytecode check each split their
    own work before). The answer and the caches written are those of one process alone, and a
    source the scan finds changed, with its pyc's header still matching, is recompiled and compared
    whichever process judged its pyc first. A failure here ends the forked process."""
    import marshal

    from patchkeeper.host import disk, distcheck
    from patchkeeper.host.contract import TreeRequest

    env.pk("snapshot", "--name", "s0")
    digest = json.loads(env.pk("status", "--json").stdout)["state"]["manifest"]
    _bytecode_cases(env.site)
    edits = _same_tick_edits(env.site, 12)
    assert len(edits) == 12
    monkeypatch.setattr(disk.StatCache, "GRANULARITY_NS", -10**12)  # remember even this fresh copy
    state = env.state_dir
    from patchkeeper import workspace
    from patchkeeper.scan import scan_request
    from patchkeeper.targets import open_target

    scan = scan_request(open_target(workspace.load(env.root).target(None)))
    request = TreeRequest(str(state / "store"), digest, scan, TAG, (), str(state / "audit" / "bytecode.cache"), None)
    caches = [state / "statcache.json", state / "statcache.json.dirs", state / "audit" / "bytecode.cache",
              state / "audit" / "bytecode.cache.dirs"]
    forks: list[int] = []
    real_fork = os.fork
    monkeypatch.setattr(os, "fork", lambda: forks.append(1) or real_fork())
    monkeypatch.setattr(disk, "alone", lambda: True)  # a test runner's worker has threads of its own
    monkeypatch.setattr(disk, "busy", lambda: False)  # nor may the other workers keep every CPU busy
    halves = []
    real_here = distcheck.PendingBytecode.here
    monkeypatch.setattr(distcheck.PendingBytecode, "here",
                        lambda self: halves.append((self.found, self.half)) or real_here(self))

    def cold(cpus):
        for cache in caches:
            cache.unlink(missing_ok=True)
        monkeypatch.setattr(os, "cpu_count", lambda: cpus)
        answer = Agent().audit_tree(request)
        return answer, [marshal.loads(c.read_bytes()) for c in caches]

    split, split_caches = cold(2)
    assert forks == [1]  # one fork for the scan and the bytecode check together
    found, half = halves[0]
    pycs = {pyc for _, pyc in edits}
    assert {rel for rel, _ in found[:half]} & pycs and {rel for rel, _ in found[half:]} & pycs  # both halves
    alone, alone_caches = cold(1)
    assert forks == [1]
    assert split == alone and split_caches == alone_caches
    assert {src for src, _ in edits} <= set(split.comparison.pairs)
    mismatched = {rel for rel, kind, _ in split.bytecode.findings if kind == "mismatch"}
    assert pycs <= mismatched
    assert f"sglang/__pycache__/version.{TAG}.pyc" in mismatched
    assert ("sglang/legacy.pyc", "sourceless") in [tuple(f[:2]) for f in split.bytecode.findings]

    def fails(self):
        raise RuntimeError("this half failed")

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(distcheck.PendingBytecode, "here", fails)
    with pytest.raises(RuntimeError, match="this half failed"):
        Agent().audit_tree(request)
    assert forks == [1, 1]
    with pytest.raises(ChildProcessError):  # the forked process was ended and waited for
        os.waitpid(-1, os.WNOHANG)


def test_pyc_names_map_to_their_sources_as_importlib_maps_them():
    """distcheck._pyc_source, in string operations, answers as importlib.util.source_from_cache does
    (None where importlib refuses the name, or the pyc is another interpreter's)."""
    import importlib.util

    from patchkeeper.host.distcheck import _pyc_source

    def importlib_answer(rel):
        parts = rel.rpartition("/")[2].split(".")
        if len(parts) < 3 or parts[1] != TAG:
            return None
        try:
            source = importlib.util.source_from_cache(rel)
        except ValueError:
            return None
        level = parts[2][4:] if len(parts) == 4 else ""
        return source, int(level) if level.isdigit() else 0

    names = []
    for stem in ("m", "_m", "m-x", ""):
        for tail in (f"{TAG}.pyc", f"{TAG}.opt-1.pyc", f"{TAG}.opt-2.pyc", f"{TAG}.opt-.pyc", f"{TAG}.opt-x1.pyc",
                     f"{TAG}.opt-1.x.pyc", f"{TAG}.x.pyc", "cpython-27.pyc", "pyc", f"{TAG}.opt-a_b.pyc"):
            for head in ("", "__pycache__/", "a/__pycache__/", "a/b/__pycache__/", "a/", "x__pycache__/",
                         "__pycache__/__pycache__/", "a.b/__pycache__/"):
                names.append(f"{head}{stem}.{tail}")
    assert len(names) > 300
    for rel in names:
        assert _pyc_source(rel, TAG) == importlib_answer(rel), rel


def test_a_forked_process_hashes_big_files_without_threads(monkeypatch, tmp_path):
    """disk.fork_call's child starts no thread and asks blake3 for none, even for big files: a pool
    the parent had started (blake3's own) is copied into the fork without its threads, and waiting
    on it would never end. The digests are the parent's."""
    import types

    from patchkeeper.host import disk

    files = []
    for name in ("a", "b"):
        files.append(tmp_path / name)
        files[-1].write_bytes(os.urandom(disk._BIG + 1))
    jobs = [(str(p), p.stat().st_size) for p in files]
    expected = disk.map_files(lambda job: disk.hash_file(*job), jobs, lambda job: job[1], 4)  # threads here
    monkeypatch.setattr(disk, "alone", lambda: True)  # a test runner's worker has threads of its own
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    parent, real = os.getpid(), disk._blake3.blake3

    def blake3(*args, **kwargs):
        if os.getpid() != parent and kwargs.get("max_threads") is not None:
            os._exit(3)  # it would wait for threads that are not there
        return real(*args, **kwargs)

    blake3.AUTO = real.AUTO  # type: ignore[attr-defined]
    monkeypatch.setattr(disk, "_blake3", types.SimpleNamespace(blake3=blake3))
    started: list[int] = []
    real_start = disk.start_threads
    monkeypatch.setattr(disk, "start_threads", lambda *a: started.append(os.getpid()) or real_start(*a))

    def child():
        return disk.map_files(lambda job: disk.hash_file(*job), jobs, lambda job: job[1], 4), os.getpid(), started

    finish = disk.fork_call(child)
    assert finish is not None
    digests, pid, threads = finish()
    assert pid != parent and threads == [] and digests == expected


def test_the_halves_of_a_split_scan_weigh_files_to_hash_by_their_recorded_size():
    """agent._halfway: a file the stat cache knows costs an lstat; one to hash, by its recorded size."""
    from patchkeeper.host.agent import _halfway

    jobs = [(f"f{i}", f"/x/f{i}") for i in range(10)]
    assert _halfway(jobs, {}, {}) == 5
    big = {"f0": ("blake3:0", 1_000_000, 0o644)}  # as much work as the nine others together, and more
    assert _halfway(jobs, {}, big) == 1
    assert _halfway(jobs, {"f0": (1_000_000, 0, 0, 0, "blake3:0")}, big) == 5  # known: an lstat
    assert _halfway(list(reversed(jobs)), {}, big) == 9
    assert _halfway([], {}, {}) == 0


def test_install_records_of_an_old_manifest_are_left_out_of_its_comparison(tmp_path):
    """States recorded before install records were left out had them: a comparison leaves them out.
    disk.install_records finds them by one search of the keys' text when there are none, else
    exactly those (a RECORD outside a top-level .dist-info directory is none)."""
    from patchkeeper.host import disk
    from patchkeeper.host.contract import CompareRequest
    from patchkeeper.manifest import Manifest

    keys = ["pkg/a.py", "pkg-1.dist-info/RECORD", "pkg-1.dist-info/METADATA", "pkg/sub.dist-info/RECORD",
            "pkg-1.dist-info/direct_url.json", "pkg/RECORD", "pkg-1.dist-info/RECORD.jws"]
    assert disk.install_records(keys) == ["pkg-1.dist-info/RECORD", "pkg-1.dist-info/direct_url.json"]
    assert disk.install_records(["pkg/a.py", "pkg/RECORD"]) == []

    (tmp_path / "site" / "pkg").mkdir(parents=True)
    (tmp_path / "site" / "pkg" / "a.py").write_text("A = 1\n")
    agent, store = Agent(), str(tmp_path / "state" / "store")
    scan = ScanRequest(str(tmp_path / "site"), (), ("pkg",))
    rows = agent.scan(scan).rows
    algorithm = rows["pkg/a.py"][0].partition(":")[0]
    old = {**rows, "pkg-1.dist-info/RECORD": (f"{algorithm}:" + "0" * 64, 10, 0o644)}
    digest = agent.store_put(store, Manifest.from_scan(old).to_text())
    assert agent.compare_many(CompareRequest(store, (digest,), scan))[0].pairs == {}
    (tmp_path / "site" / "pkg" / "a.py").write_text("A = 2\n")  # the comparison is not blind
    assert list(agent.compare_many(CompareRequest(store, (digest,), scan))[0].pairs) == ["pkg/a.py"]
