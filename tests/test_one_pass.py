"""One pass over the tree (host/agent.py scan, host/distcheck.py): the scan's walk also yields the
bytecode, so the bytecode check walks none of the package's directories again and judges each pyc
by the stat the scan took; and recorded manifests come from a versioned cache beside the store,
never believed over the stored object it was made from."""

from __future__ import annotations

import json
import os
import py_compile
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from conftest import edit_file
from patchkeeper.host import agent as agent_module
from patchkeeper.host import manifests
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


def _tree_request(env, **fields):
    """An audit_tree request for the env's target against its current state (one must be recorded)."""
    from patchkeeper import workspace
    from patchkeeper.host.contract import TreeRequest
    from patchkeeper.checks.scan import scan_request
    from patchkeeper.targets import open_target

    digest = json.loads(env.pk("status", "--json").stdout)["state"]["manifest"]
    scan = scan_request(open_target(workspace.load(env.root).target(None)))
    return TreeRequest(str(env.state_dir / "store"), digest, scan, TAG, **fields)


def test_the_tree_audit_lists_each_directory_once_and_finds_what_the_bytecode_check_finds(env, monkeypatch):
    """audit_tree: one walk yields the package's files and its bytecode (the rest of site-packages
    is walked for bytecode alone), so no directory of the package is listed twice, and the
    bytecode found is what the bytecode check alone, walking everything itself, finds."""
    from patchkeeper.host import disk

    env.pk("snapshot", "--name", "s0")
    site = str(env.site)
    _bytecode_cases(env.site)
    full = Agent().audit_bytecode(site, TAG, [], None)  # no scan beside it: walks everything itself
    kinds = {rel: kind for rel, kind, _ in full.findings}
    assert kinds == {f"sglang/__pycache__/version.{TAG}.pyc": "mismatch", "sglang/legacy.pyc": "sourceless",
                     f"outside/__pycache__/mod.{TAG}.pyc": "mismatch"}

    request = _tree_request(env)
    for cache in env.state_dir.glob("statcache.json*"):  # the snapshot's: listings remembered there are not listed
        cache.unlink()
    listed: list[str] = []
    real_scandir = os.scandir
    monkeypatch.setattr(disk, "allow_split", lambda allowed: False)  # one process: every listing seen here
    monkeypatch.setattr(disk, "cpus", lambda: 1)
    monkeypatch.setattr(os, "scandir", lambda path=".": listed.append(str(path)) or real_scandir(path))
    tree = Agent().audit_tree(request)
    monkeypatch.undo()
    assert tree.bytecode == full and tree.comparison.pairs == {}
    package = [p for p in listed if p.startswith(f"{site}/sglang/") or p == f"{site}/sglang"]
    assert len(package) == len(set(package)), "a directory of the package was listed twice"
    assert set(package) == {d for d, _, _ in os.walk(f"{site}/sglang")}  # and each one was
    assert any(p.startswith(f"{site}/outside") for p in listed)  # the rest of site-packages still is


def test_manifests_come_from_their_cache_and_never_over_the_stored_object(env, monkeypatch):
    env.pk("snapshot", "--name", "s0")
    digest = json.loads(env.pk("status", "--json").stdout)["state"]["manifest"]
    store = str(env.state_dir / "store")
    rows = Agent().manifest_rows(store, digest)
    assert len(rows) > 5000 and list((env.state_dir / "manifest-cache").iterdir())

    def no_parsing(data: bytes) -> dict:
        raise AssertionError("manifest text parsed")

    monkeypatch.setattr(manifests, "parse", no_parsing)
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


def test_a_units_digests_taken_apart_are_what_take_makes_of_them(tmp_path):
    """StatCache.taken (a unit's hashed files made into rows and stat cache entries where they were
    hashed) merged by two dict updates, its hits by take, is StatCache.take: a remembered digest
    kept as it was, a new one remembered, one too fresh to remember (the racily-clean rule) only in
    the rows."""
    from patchkeeper.host.disk import StatCache

    cache = StatCache(None)
    old, now = cache.started_ns - 10 * cache.GRANULARITY_NS, cache.started_ns
    cache.entries = {"a.py": (1, old, old, 7, "blake3:a")}
    done = ((["a.py"], [0o644]), [("b.py", ("blake3:b", 2, 0o644), (2, old, old, 8)),
                                  ("c.py", ("blake3:c", 3, 0o755), (3, old, now, 9))])
    out: dict = {}
    cache.take(done, out)
    whole = dict(cache.fresh)
    cache.fresh.clear()
    hits, rows, fresh = cache.taken(done)
    merged: dict = {}
    cache.take((hits, []), merged)
    merged.update(rows)
    cache.fresh.update(fresh)
    assert merged == out and list(merged) == ["a.py", "b.py", "c.py"]
    assert cache.fresh == whole == {"a.py": (1, old, old, 7, "blake3:a"), "b.py": (2, old, old, 8, "blake3:b")}


def test_differences_of_rows_and_of_entries_agree():
    """Manifests made from rows compare by rows first; rows that differ only in type still agree."""
    from patchkeeper.records.manifest import Entry, Manifest, differences

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


def test_beside_a_forked_process_each_file_is_hashed_as_it_is_met_with_the_same_answers(tmp_path, monkeypatch):
    """disk.digest_files in a process sharing units with a forked one (or in that one) hashes each
    file as soon as its lstat says it must, by reads of disk.CHUNK, rather than through map_files:
    the same rows, identities, stats and order as map_files gives (a remembered digest, a file
    edited since, an empty, a big and a gone file, a symlink, a directory), in blake3 and sha256;
    and an algorithm this Python lacks fails as before, only once there is a file to hash."""
    from patchkeeper.host import disk

    root = tmp_path / "tree"
    root.mkdir()
    (root / "kept.py").write_text("kept = 1\n")
    (root / "edited.py").write_text("edited = 1\n")
    (root / "empty.py").write_bytes(b"")
    (root / "big.so").write_bytes(os.urandom(3 * disk.CHUNK + 5))
    (root / "dir").mkdir()
    (root / "link.py").symlink_to(root / "kept.py")
    names = ["kept.py", "edited.py", "gone.py", "empty.py", "big.so", "dir", "link.py"]
    jobs = [(name, str(root / name)) for name in names]
    st = os.lstat(root / "kept.py")
    known = {"kept.py": (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, "blake3:remembered"),
             "edited.py": (1, 2, 3, 4, "blake3:stale")}
    for algorithm in ("blake3", "sha256"):
        serial_stats: dict = {}
        serial = disk.digest_files(jobs, known, algorithm, serial_stats)
        reads: list[int] = []
        real_read = os.read
        monkeypatch.setattr(os, "read", lambda fd, n: reads.append(n) or real_read(fd, n))
        monkeypatch.setattr(disk, "map_files", lambda *a, **k: pytest.fail("not through map_files"))
        monkeypatch.setattr(disk, "_sharing", True)
        shared_stats: dict = {}
        shared = disk.digest_files(jobs, known, algorithm, shared_stats)
        monkeypatch.undo()
        assert shared == serial and shared_stats == serial_stats
        (hits, _), hashed = shared
        assert hits == (["kept.py"] if algorithm == "blake3" else [])
        assert [d[0] for d in hashed] == [n for n in ("kept.py", "edited.py", "empty.py", "big.so") if n not in hits]
        assert set(reads) == {disk.CHUNK} and len(reads) == (2 + 2 + 1 + 5 if algorithm == "sha256" else 2 + 1 + 5)
    assert dict((k, row) for k, row, _ in hashed)["big.so"][0] == disk.hash_file(str(root / "big.so"), 0, "sha256")
    monkeypatch.setattr(disk, "_sharing", True)
    assert disk.digest_files(jobs[:1], known, "blake3", {}) == ((["kept.py"], [st.st_mode & 0o7777]), [])  # no hash
    with pytest.raises(AgentError, match="cannot hash with 'md5'"):
        disk.digest_files(jobs, known, "md5", {})


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
    from patchkeeper.checks.scan import scan_request
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
        from patchkeeper.host import treecheck

        for name in ("check_bytecode", "TreeWork"):
            m.setattr(agent_module, name, nothing_else)
        m.setattr(manifests, "parse", nothing_else)
        for name in ("walk_files", "digest_files", "_walk_pyc"):
            m.setattr(treecheck, name, nothing_else)
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

    # another distribution's RECORD is checked in the same call, never from the tree's seal: a file
    # no seal covers (not below the package, no .py), edited keeping its size and mtime, is found
    with_records = replace(request, records=("pip-23.2.1.dist-info",), record_cache=str(state / "audit"),
                           native_sites=(str(site),), native_cache=str(state / "env" / "native"))
    assert Agent().audit_tree(with_records).records["pip-23.2.1.dist-info"].findings == ()
    assert Agent().audit_tree(with_records).records["pip-23.2.1.dist-info"].findings == ()  # sealed
    exe = site / "pip" / "_vendor" / "distlib" / "t64.exe"
    edit_file(exe, exe.read_bytes())  # an inode of our own, edited in place: no directory changes
    Agent().audit_tree(with_records)  # sealed again
    st = exe.stat()
    with open(exe, "r+b") as f:
        f.write(b"MZ by hand")
    os.utime(exe, ns=(st.st_atime_ns, st.st_mtime_ns))
    with monkeypatch.context() as m:
        m.setattr(agent_module, "TreeWork", nothing_else)  # the tree from its seal
        found = Agent().audit_tree(with_records)
    assert [f[:2] for f in found.records["pip-23.2.1.dist-info"].findings] == [("pip/_vendor/distlib/t64.exe", "changed")]
    from patchkeeper.host import fingerprint  # and the native libraries, read as always

    assert found.native == fingerprint.native([str(site)], None) and any(k.endswith(".so") for k in found.native)


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
    monkeypatch.setattr(disk, "cpus", lambda: 2)
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
    monkeypatch.setattr(disk, "cpus", lambda: 2)
    monkeypatch.setattr(disk, "alone", lambda: True)  # a test runner's worker has threads of its own
    monkeypatch.setattr(disk, "busy", lambda: True)
    assert seal.identities(paths) == seal.stat_identities(paths) and forks == []
    monkeypatch.setattr(disk, "busy", lambda: False)
    assert seal.identities(paths) == seal.stat_identities(paths) and forks == [1]
    monkeypatch.undo()
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})  # a container given one of the host's CPUs
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(disk, "alone", lambda: True)
    assert disk.cpus() == 1 and disk.fork_call(lambda: 1) is None  # counted alike by fork_call and busy
    loadavg.write_text("0.10 0.05 0.01 1/312 40211\n")
    assert disk.busy(str(loadavg))


def test_many_small_files_are_split_with_a_forked_process_and_keep_their_order(monkeypatch, tmp_path):
    """map_files(pure=True): half of many small jobs go to a forked process, started before the big
    files' threads; answers keep their order; an error in the child's half is raised here, as it
    would have been; side effects stay with the caller (the stat cache is remembered after)."""
    from patchkeeper.host import disk

    monkeypatch.setattr(disk, "alone", lambda: True)  # a test runner's worker has threads of its own
    monkeypatch.setattr(disk, "busy", lambda: False)  # nor may the other workers keep every CPU busy
    monkeypatch.setattr(disk, "cpus", lambda: 2)
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


def _stamped(site, top):
    """(source, pyc) pairs below site/top whose (timestamp) pyc header matches the source."""
    pairs = []
    for pyc in sorted((site / top).rglob(f"__pycache__/*.{TAG}.pyc")):
        src = pyc.parent.parent / (pyc.name.split(".")[0] + ".py")
        head = pyc.read_bytes()[:16]
        if not src.is_file() or int.from_bytes(head[4:8], "little") or src.stat().st_size < 8:
            continue
        st = src.stat()
        stamped = (int.from_bytes(head[8:12], "little"), int.from_bytes(head[12:16], "little"))
        if stamped == (int(st.st_mtime), st.st_size):
            pairs.append((src, pyc))
    return pairs


def _same_tick_edit(site, src):
    """Edit a source keeping its size and mtime: the header of its (timestamp) pyc still matches, so
    only a recompile shows that the pyc runs other code."""
    st, data = src.stat(), src.read_bytes()
    edit_file(src, b"x=1\n" + data[:-4])  # other code (or none that compiles), of the same size
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns))
    return str(src.relative_to(site))


def test_a_cold_audit_shared_by_two_processes_gives_the_one_process_answer(env, monkeypatch, tmp_path):
    """audit_tree over many files: a forked process claims units of the work (groups of the
    package's directories, the rest of it, the other distributions' RECORD, the bytecode beside)
    as this one does, from the walk on. The answer and every cache written are those of one process
    alone, with a same-size, same-mtime edit in every unit of the package and in another
    distribution, whichever process ran it; a source found changed, with its pyc's header still
    matching, is recompiled and compared whichever process judged its pyc first. A failure here
    ends the forked process."""
    import marshal

    from patchkeeper.host import disk, treecheck

    env.pk("snapshot", "--name", "s0")
    _bytecode_cases(env.site)
    request = _tree_request(env, bytecode_cache=str(env.state_dir / "audit" / "bytecode.cache"),
                            records=("pip-23.2.1.dist-info", "setuptools-65.5.0.dist-info"),
                            record_cache=str(env.state_dir / "audit"), native_sites=(str(env.site),),
                            native_cache=str(env.state_dir / "env" / "native"))
    expected = Agent().manifest_rows(request.store, request.manifest)
    groups = treecheck.groups(expected, request.scan.walk)
    assert len(groups) > 20
    pairs = [str(src.relative_to(env.site)) for src, _ in _stamped(env.site, "sglang")]
    inside = tuple(d + "/" for group in groups for d in group)
    edits = {}  # unit -> the file edited there (or, beside the package, the pyc found)
    for i, group in enumerate(groups):  # a source with its pyc where there is one, else any file
        below = tuple(d + "/" for d in group)
        rel = next((p for p in pairs if p.startswith(below)), None) or next(k for k in expected if k.startswith(below))
        edits[f"group {i}"] = _same_tick_edit(env.site, env.site / rel)
    edits["rest"] = _same_tick_edit(env.site, env.site / next(p for p in pairs if not p.startswith(inside)))
    for name in ("pip", "setuptools"):  # other distributions': found by their RECORD
        edits[name] = _same_tick_edit(env.site, _stamped(env.site, name)[0][0])
    edits["beside"] = f"outside/__pycache__/mod.{TAG}.pyc"
    monkeypatch.setattr(disk.StatCache, "GRANULARITY_NS", -10**12)  # remember even this fresh copy
    state = env.state_dir
    caches = [state / "statcache.json", state / "statcache.json.dirs", state / "audit" / "bytecode.cache",
              state / "audit" / "bytecode.cache.dirs", state / "audit" / "pip-23.2.1.dist-info.json",
              state / "audit" / "setuptools-65.5.0.dist-info.json", state / "audit" / "records.seal"]
    forks: list[int] = []
    real_fork = os.fork
    monkeypatch.setattr(os, "fork", lambda: forks.append(real_fork()) or forks[-1])
    monkeypatch.setattr(disk, "alone", lambda: True)  # a test runner's worker has threads of its own
    monkeypatch.setattr(disk, "busy", lambda: False)  # nor may the other workers keep every CPU busy
    ran = tmp_path / "ran"  # "pid unit" of every unit run, by either process
    real_run, parent = treecheck.TreeWork.run, os.getpid()
    waiting = []  # once: this process's first unit waits until the forked process has claimed one

    def run(self, i):
        with open(ran, "a") as log:
            log.write(f"{os.getpid()} {i}\n")
        for _ in range(12_000 if os.getpid() == parent and waiting else 0):  # (a lost child fails below)
            if any(int(line.split()[0]) != parent for line in ran.read_text().splitlines()):
                break
            time.sleep(0.005)
        waiting.clear()
        return real_run(self, i)

    monkeypatch.setattr(treecheck.TreeWork, "run", run)

    def cold(cpus):
        for cache in caches:
            cache.unlink(missing_ok=True)
        ran.unlink(missing_ok=True)
        monkeypatch.setattr(disk, "cpus", lambda: cpus)
        answer = Agent().audit_tree(request)
        return answer, [marshal.loads(c.read_bytes()) for c in caches]

    waiting.append(1)
    split, split_caches = cold(2)
    assert len(forks) == 1  # one fork for all of it
    units = ["rest", "pip", "setuptools", "native", "beside", *(f"group {i}" for i in range(len(groups)))]
    by = {}  # pid -> the units it ran
    for line in ran.read_text().splitlines():
        pid, i = line.split()
        by.setdefault(int(pid), set()).add(units[int(i)])
    assert len(by) == 2 and sorted(set().union(*by.values())) == sorted(units)  # every unit, on both sides
    alone, alone_caches = cold(1)
    assert len(forks) == 1
    assert split == alone and split_caches == alone_caches
    monkeypatch.setattr(agent_module, "_HEAVY_RECORD", 50_000)  # pip's RECORD (77 kB) checked first, on its own
    waiting.append(1)
    assert cold(2) == (alone, alone_caches) and len(forks) == 2
    assert {int(line.split()[1]) for line in ran.read_text().splitlines()} == set(range(len(units) - 1))  # no pip
    package = {edits[u] for u in edits if u not in ("pip", "setuptools", "beside")}
    assert set(split.comparison.pairs) == package
    for name, dist in (("pip", "pip-23.2.1.dist-info"), ("setuptools", "setuptools-65.5.0.dist-info")):
        assert [tuple(f[:2]) for f in split.records[dist].findings] == [(edits[name], "changed")]
    mismatched = {rel.replace("/__pycache__", "").split(".")[0] for rel, kind, _ in split.bytecode.findings
                  if kind == "mismatch"}
    assert {e[:-3] for e in edits.values() if e.endswith(".py")} <= mismatched  # each one's pyc, recompiled
    assert {"sglang/version", "outside/mod"} <= mismatched
    assert split.native and any(k.endswith(".so") for k in split.native)
    assert ("sglang/legacy.pyc", "sourceless") in [tuple(f[:2]) for f in split.bytecode.findings]

    def fails(self, i):
        if os.getpid() == parent:
            raise RuntimeError("this unit failed")
        return real_run(self, i)

    monkeypatch.setattr(disk, "cpus", lambda: 2)
    monkeypatch.setattr(treecheck.TreeWork, "run", fails)
    with pytest.raises(RuntimeError, match="this unit failed"):
        Agent().audit_tree(request)
    assert len(forks) == 3
    with pytest.raises(ChildProcessError):  # the forked process was ended and waited for
        os.waitpid(forks[2], os.WNOHANG)


def test_a_plan_of_the_work_is_never_believed_over_the_tree(env, monkeypatch):
    """The groups a tree audit shares out come from a plan kept beside the manifest's cached rows;
    whatever it names (a symlink to a directory, a directory and one below it, one that is not
    there, a dist-info's, the package itself), the answer and every cache are those of one serial
    walk: a group counts only where that walk met its directory as one."""
    import marshal

    from patchkeeper.host import disk, treecheck

    env.pk("snapshot", "--name", "s0")
    (env.site / "sglang" / "linked").symlink_to(env.site / "sglang" / "srt")
    request = _tree_request(env, bytecode_cache=str(env.state_dir / "audit" / "bytecode.cache"))
    monkeypatch.setattr(disk.StatCache, "GRANULARITY_NS", -10**12)  # remember even this fresh copy
    monkeypatch.setattr(disk, "alone", lambda: True)  # a test runner's worker has threads of its own
    monkeypatch.setattr(disk, "busy", lambda: False)
    state = env.state_dir
    caches = [state / "statcache.json", state / "statcache.json.dirs", state / "audit" / "bytecode.cache",
              state / "audit" / "bytecode.cache.dirs"]

    def cold(cpus):
        for cache in caches:
            cache.unlink(missing_ok=True)
        monkeypatch.setattr(disk, "cpus", lambda: cpus)
        answer = Agent().audit_tree(request)
        return answer, [marshal.loads(c.read_bytes()) for c in caches]

    serial = cold(1)
    kept = list((state / "manifest-cache").glob("*.groups"))
    assert len(kept) == 1  # the plan, kept
    bogus = [["sglang/linked/layers"], ["sglang/srt", "sglang/srt/layers"], ["sglang/not_there"],
             ["sglang-0.5.23.dist-info/licenses"], ["sglang"], ["../elsewhere"], ["sglang/lang/__pycache__"]]
    monkeypatch.setattr(treecheck, "groups", lambda rows, walk: bogus)
    kept[0].unlink()
    planned = []
    real_init = treecheck.TreeWork.__init__
    monkeypatch.setattr(treecheck.TreeWork, "__init__", lambda self, *a: real_init(self, *a) or planned.append(self.groups))
    assert cold(2) == serial
    assert planned == [[["sglang/linked/layers"], ["sglang/srt"], ["sglang/not_there"]]]  # the rest never shared out
    assert serial[0].comparison.pairs == {}  # nothing found through the link (a walk does not enter it)


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
    monkeypatch.setattr(disk, "cpus", lambda: 2)
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


def test_units_are_shared_by_two_processes_and_a_lost_unit_is_run_here(monkeypatch):
    """disk.share_units: each unit is run once, by this process or the forked one, whichever claims
    it first; the forked one gives back its state; a unit it claimed and did not give back (it
    failed) is run here, where its error, if any, is raised."""
    from patchkeeper.host import disk

    monkeypatch.setattr(disk, "alone", lambda: True)  # a test runner's worker has threads of its own
    monkeypatch.setattr(disk, "cpus", lambda: 2)
    parent = os.getpid()
    claimed = []

    def run(i):
        claimed.append(i)  # in this process's memory only
        if i == 0 and os.getpid() == parent:
            time.sleep(0.2)  # the other process claims meanwhile
        return i * i, os.getpid()

    done, state = disk.share_units(run, 40, lambda: ("child", sorted(claimed)))
    assert sorted(done) == list(range(40)) and {v for v, _ in done.values()} == {i * i for i in range(40)}
    theirs = sorted(i for i, (_, pid) in done.items() if pid != parent)
    assert theirs and state == ("child", theirs) and sorted(claimed) == sorted(set(range(40)) - set(theirs))

    def lost(i):
        if os.getpid() != parent:
            os._exit(3) if i % 2 else time.sleep(0.01)  # the forked process dies on its first odd unit
        return i, os.getpid()

    done, state = disk.share_units(lost, 20)
    assert sorted(done) == list(range(20)) and state is None

    def fails(i):
        if i == 7:
            raise ValueError(f"unit {i} failed")
        return i

    forked = []
    real_fork = os.fork
    monkeypatch.setattr(os, "fork", lambda: forked.append(real_fork()) or forked[-1])
    with pytest.raises(ValueError, match="unit 7 failed"):  # wherever it was claimed
        disk.share_units(fails, 20)
    assert len(forked) == 1
    with pytest.raises(ChildProcessError):  # and the forked process was waited for
        os.waitpid(forked[0], os.WNOHANG)


def test_the_forked_processs_results_cross_as_each_unit_is_done(monkeypatch, tmp_path):
    """disk.share_units: the forked process gives back each unit's result as soon as it is done,
    without waiting for this process to read it: with results bigger than a pipe holds, it goes on
    to its next unit while this one is still busy with its first; and a unit it gave back before it
    died is not run again here (the one it died in is). Every result is the unit's."""
    from patchkeeper.host import disk

    monkeypatch.setattr(disk, "alone", lambda: True)  # a test runner's worker has threads of its own
    monkeypatch.setattr(disk, "cpus", lambda: 2)
    parent = os.getpid()

    def share(size, die):
        log = tmp_path / f"ran-{size}"  # "pid unit" of every unit begun, by either process
        saw = []  # this process's first unit saw the forked one begin its second

        def lines():
            return [(int(pid), int(i)) for pid, i in (line.split() for line in log.read_text().splitlines())]

        def run(i):
            first = not log.exists() or all(pid != os.getpid() for pid, _ in lines())
            with open(log, "a") as f:
                f.write(f"{os.getpid()} {i}\n")
            if os.getpid() == parent and first:
                for _ in range(12_000):  # (a forked process that waited for this one would fail below)
                    if len([u for pid, u in lines() if pid != parent]) >= 2:
                        saw.append(True)
                        break
                    time.sleep(0.005)
            elif os.getpid() != parent and not first and die:
                os._exit(3)  # on its second unit, once its first one's result went
            return i, bytes([i]) * size

        done, state = disk.share_units(run, 12)
        assert sorted(done) == list(range(12)) and all(done[i] == (i, bytes([i]) * size) for i in done)
        assert saw == [True] and state is None
        return [u for pid, u in lines() if pid != parent], [u for pid, u in lines() if pid == parent]

    theirs, mine = share(200_000, die=False)  # three times what a pipe holds, each
    assert sorted(theirs + mine) == list(range(12))
    (gave, died), mine = share(2_000, die=True)
    assert sorted(mine) == [i for i in range(12) if i != gave] and died in mine


def test_the_package_is_planned_in_groups_of_directories_by_recorded_work():
    """treecheck.groups: directories the manifest knows, none inside another, neither a top one
    (the rest walks those) nor a dist-info; one heavier than 1/PARTS of the work is split into its
    subdirectories; small ones are packed together; files weigh by their recorded size."""
    from patchkeeper.host import treecheck

    rows = {f"pkg/big/sub{i}/m{j}.py": ("blake3:0", 100, 0o644) for i in range(60) for j in range(10)}
    rows.update({f"pkg/small{i}/m.py": ("blake3:0", 100, 0o644) for i in range(30)})
    rows["pkg/heavy/data.bin"] = ("blake3:0", 25_000 * 300, 0o644)  # one file, as heavy as 100 small ones
    rows["pkg/__init__.py"] = ("blake3:0", 100, 0o644)
    rows["pkg-1.0.dist-info/sub/x"] = ("blake3:0", 100, 0o644)
    rows["pkg/vendored-2.0.dist-info/RECORD"] = ("blake3:0", 100, 0o644)  # walked from "pkg": its pycs are found
    rows["../../../bin/tool"] = ("blake3:0", 100, 0o644)
    groups = treecheck.groups(rows, ("pkg", "pkg-1.0.dist-info"))
    dirs = [d for group in groups for d in group]
    assert len(dirs) == len(set(dirs)) and not any(a.startswith(b + "/") for a in dirs for b in dirs)
    assert "pkg" not in dirs and "pkg/big" not in dirs and not any("dist-info" in d for d in dirs)
    assert {f"pkg/big/sub{i}" for i in range(60)} <= set(dirs) and "pkg/heavy" in dirs
    assert groups[0] == ["pkg/heavy"]  # the heaviest first
    assert len(groups) < len(dirs)  # the small ones packed together
    assert treecheck.groups({}, ("pkg",)) == []


def test_the_halves_of_a_split_scan_weigh_files_to_hash_by_their_recorded_size():
    """compare._halfway: a file the stat cache knows costs an lstat; one to hash, by its recorded size."""
    from patchkeeper.host.compare import _halfway

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
    from patchkeeper.records.manifest import Manifest

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


def test_a_file_is_hashed_in_reads_of_a_mebibyte(tmp_path, monkeypatch):
    """disk.feed reads by disk.CHUNK (1 MiB): a 3 MiB file in four reads, the last one empty. A
    second constant of the same name once shadowed it, and every file was read 256 bytes at a time
    (a cold audit of sglang made 550,000 reads and took twice as long)."""
    from patchkeeper.host import disk

    big = tmp_path / "big"
    big.write_bytes(os.urandom(3 << 20))
    reads: list[int] = []
    real = os.read
    monkeypatch.setattr(os, "read", lambda fd, n: reads.append(n) or real(fd, n))
    disk.hash_file(str(big), 3 << 20)
    assert reads == [1 << 20] * 4
