"""One pass over the tree (host/agent.py scan, host/distcheck.py): the scan's walk also yields the
bytecode, so the bytecode check walks none of the package's directories again and judges each pyc
by the stat the scan took; and recorded manifests are read from the store, verified."""

from __future__ import annotations

import json
import marshal
import os
import py_compile
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import edit_file

from patchkeeper.host import (
    agent as agent_module,
    manifest_text,
    manifests,
    statcache,
    treecheck as treecheck_module,
)
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
    py_compile.compile(
        str(other), cfile=str(inside), invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH
    )
    py_compile.compile(str(other), cfile=str(site / "sglang" / "legacy.pyc"))
    (site / "outside").mkdir()
    (site / "outside" / "mod.py").write_text("X = 1\n")
    outside = site / "outside" / "__pycache__" / f"mod.{TAG}.pyc"
    outside.parent.mkdir()
    py_compile.compile(
        str(other), cfile=str(outside), invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH
    )
    other.unlink()


def _tree_request(env, **fields):
    """An audit_tree request for the env's target against its current state (one must be recorded)."""
    from patchkeeper import workspace
    from patchkeeper.checks.scan import scan_request
    from patchkeeper.host.contract import TreeRequest
    from patchkeeper.targets import open_target

    digest = json.loads(env.pk("status", "--json").stdout)["state"]["manifest"]
    scan = scan_request(open_target(workspace.load(env.root).target(None)))
    return TreeRequest(str(env.state_dir / "store"), digest, scan, TAG, **fields)


def test_the_tree_audit_lists_each_directory_once_and_finds_what_the_bytecode_check_finds(
    baselined, monkeypatch
):
    """audit_tree: one walk yields the package's files and its bytecode (the rest of site-packages
    is walked for bytecode alone), so no directory of the package is listed twice, and the
    bytecode found is what the bytecode check alone, walking everything itself, finds."""
    env = baselined
    env.pk("snapshot", "--name", "s0")
    site = str(env.site)
    _bytecode_cases(env.site)
    full = Agent().audit_bytecode(site, TAG, [], None)  # no scan beside it: walks everything itself
    kinds = {rel: kind for rel, kind, _ in full.findings}
    assert kinds == {
        f"sglang/__pycache__/version.{TAG}.pyc": "mismatch",
        "sglang/legacy.pyc": "sourceless",
        f"outside/__pycache__/mod.{TAG}.pyc": "mismatch",
    }

    request = _tree_request(env)
    for cache in env.state_dir.glob(
        "statcache.json*"
    ):  # the snapshot's: listings remembered there are not listed
        cache.unlink()
    listed: list[str] = []
    real_scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path=".": listed.append(str(path)) or real_scandir(path))
    tree = Agent().audit_tree(request)
    monkeypatch.undo()
    assert tree.bytecode == full and tree.comparison.pairs == {}
    package = [p for p in listed if p.startswith(f"{site}/sglang/") or p == f"{site}/sglang"]
    assert len(package) == len(set(package)), "a directory of the package was listed twice"
    assert set(package) == {d for d, _, _ in os.walk(f"{site}/sglang")}  # and each one was
    assert any(p.startswith(f"{site}/outside") for p in listed)  # the rest of site-packages still is


def test_a_stored_manifest_is_read_from_the_store_and_a_corrupt_one_is_an_error(baselined):
    env = baselined
    env.pk("snapshot", "--name", "s0")
    digest = json.loads(env.pk("status", "--json").stdout)["state"]["manifest"]
    store = str(env.state_dir / "store")
    rows = Agent().manifest_rows(store, digest)
    assert len(rows) > 5000 and not (env.state_dir / "manifest-cache").exists()  # no copy kept (issue 31)
    algo, _, hexd = digest.partition(":")
    obj = env.state_dir / "store" / "objects" / algo / hexd[:2] / hexd[2:]
    data = obj.read_bytes()
    obj.unlink()
    obj.write_bytes(data.replace(b"sglang/", b"sglanX/", 1))  # a corrupt object is an error
    with pytest.raises(AgentError) as exc:
        Agent().manifest_rows(store, digest)
    assert exc.value.kind == "corrupt-object"


def _scanned(env, monkeypatch) -> tuple[str, str, Path, ScanRequest, dict]:
    """A scan of the package with a stat cache that remembers every file (even this fresh copy), one
    file of which (returned: its key and path) is an inode of our own, to be edited in place."""

    rel = "sglang/version.py"
    path = env.site / rel
    edit_file(path, path.read_bytes())  # an inode of our own: the edit below is in place
    monkeypatch.setattr(statcache.StatCache, "GRANULARITY_NS", -(10**12))
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
    assert statcache.StatCache(cache).entries[rel][5] == first[rel][0]  # remembered, by stat identity
    _edit_in_place(path)
    again = Agent().scan(request).rows
    assert again[rel][0] != first[rel][0] and again[rel][0] == disk.hash_file(str(path))

    # a cache file that is not ours (the old JSON form, another stamp) is empty, never misread
    for foreign in (
        b'{"sglang/version.py": [1, 2, 3, 4, "blake3:00"]}',
        __import__("marshal").dumps((("pk-statcache", 1, (3, 0)), {rel: (0, 0, 0, 0, "x")})),
        __import__("marshal").dumps((("pk-statcache", 2, sys.version_info[:2]), {rel: (0, 0, 0, 0, "x")})),
    ):
        with open(cache, "wb") as f:
            f.write(foreign)
        assert statcache.StatCache(cache).entries == {}
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
    monkeypatch.setattr(
        statcache.StatCache, "GRANULARITY_NS", 10**15
    )  # now nothing is old enough to remember
    for _ in range(2):
        again = Agent().scan(request).rows
        assert again[rel][0] == disk.hash_file(str(path)) != first[rel][0]  # the kept entry is not believed
        assert {k for k in first if first[k] != again[k]} == {rel}
        assert (
            os.stat(cache).st_ino == written.st_ino
            and statcache.StatCache(cache).entries[rel][5] == first[rel][0]
        )

    monkeypatch.setattr(statcache.StatCache, "GRANULARITY_NS", -(10**12))
    assert Agent().scan(request).rows == again
    assert statcache.StatCache(cache).entries[rel][5] == again[rel][0]  # learned: written


def test_differences_of_rows_and_of_entries_agree():
    """Manifests made from rows compare by rows first; rows that differ only in type still agree."""
    from patchkeeper.records.manifest import Entry, Manifest, differences

    rows = {"a": ["blake3:1", 1, 0o644], "b": ["blake3:2", 2, 0o644], "c": ["blake3:3", 3, 0o644]}
    same = Manifest.from_scan(rows)
    assert differences(same, Manifest.from_scan(dict(rows))) == {}
    assert (
        differences(same, Manifest.from_scan({k: tuple(v) for k, v in rows.items()})) == {}
    )  # tuples, not lists
    assert differences(same, Manifest({k: Entry.of(v) for k, v in rows.items()})) == {}
    other = Manifest.from_scan(
        {"a": ["blake3:1", 1, 0o755], "b": ["blake3:9", 2, 0o644], "d": ["blake3:4", 4, 0o644]}
    )
    assert differences(same, other) == {"a": "mode", "b": "changed", "c": "removed", "d": "added"}
    assert (
        dict(other)
        == {
            "a": Entry("blake3:1", 1, 0o755),
            "b": Entry("blake3:9", 2, 0o644),
            "d": Entry("blake3:4", 4, 0o644),
        }
        and "c" not in other
        and len(other) == 3
    )
    # rows stay rows through replace and the text form, which is the one Entries give
    changes = {"a": None, "e": Entry("blake3:5", 5, 0o600), "b": Entry("blake3:6", 2, 0o644)}
    as_entries = Manifest({k: Entry.of(v) for k, v in rows.items()})
    assert same.replace(changes).to_text() == as_entries.replace(changes).to_text()
    assert dict(same.replace(changes)) == dict(as_entries.replace(changes))
    assert Manifest.from_scan(manifest_text.parse(same.to_text())).to_text() == as_entries.to_text()


def test_a_remembered_directory_listing_is_never_believed_over_the_directory(env, monkeypatch):
    """The scan remembers each walked directory's entries by the directory's stat identity: a file
    added (or removed) in the same directory later is found, because the directory changed."""

    site, cache = str(env.site), str(env.state_dir / "statcache.json")
    monkeypatch.setattr(statcache.StatCache, "GRANULARITY_NS", -(10**12))  # remember even this fresh copy
    request = ScanRequest(root=site, walk=("sglang",), cache=cache)
    first = Agent().scan(request).rows
    lang = env.site / "sglang" / "lang"
    assert str(lang) in statcache.Listings(cache + ".dirs").entries  # remembered

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


def test_the_switch_interval_is_short_while_big_files_hash_on_threads_and_put_back_by_the_last_call():
    """map_files with big files on threads: each job sees disk.HANDOFF_S as the switch interval (a
    hashing thread waiting for the GIL after each chunk gets it back soon); with two such calls at
    once on two threads, the first to end leaves it short for the other, and the last to end puts
    back the interval there was before. With fewer than two big files nothing changes."""
    import sys
    import threading

    from patchkeeper.host import disk

    before = sys.getswitchinterval()
    seen: list[float] = []
    both_in = threading.Barrier(2)
    first_out = threading.Event()

    def fn(job):
        seen.append(sys.getswitchinterval())
        return job[0]

    def call(name: str) -> None:
        def blocking(job):
            if job[0] == 1:  # a small job (this calling thread): both calls are inside now
                both_in.wait(10)
                if name == "second":
                    first_out.wait(10)
                    seen.append(sys.getswitchinterval())  # the first call has ended
            return fn(job)

        jobs = [(0, disk.BIG_FILE), (1, 10), (2, disk.BIG_FILE)]
        try:
            answers[name] = disk.map_files(blocking, jobs, lambda job: job[1], 2)
        finally:
            if name == "first":
                first_out.set()

    answers: dict[str, list[int]] = {}
    threads = [threading.Thread(target=call, args=(name,)) for name in ("first", "second")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == {
        "first": [0, 1, 2],
        "second": [0, 1, 2],
    }  # (an error on a thread leaves its answer out)
    assert len(seen) == 7 and set(seen) == {disk.HANDOFF_S}
    assert sys.getswitchinterval() == before != disk.HANDOFF_S
    seen.clear()
    assert disk.map_files(fn, [(0, disk.BIG_FILE), (1, 10)], lambda job: job[1], 2) == [0, 1]
    assert seen == [before, before]


def test_digests_come_from_the_cache_while_the_identity_holds_else_from_the_bytes(tmp_path, monkeypatch):
    """StatCache.digests: in the jobs' order, a row for each regular file (a gone file, a symlink and a
    directory have none), the remembered digest while the file's identity holds and the digest is in
    the algorithm asked for, else the file hashed by reads of disk.CHUNK, in blake3 and sha256; each
    file's stat goes to `stats`; an algorithm this Python lacks fails only once a file is to be hashed."""
    from patchkeeper.host import disk
    from patchkeeper.host.statcache import StatCache, identity

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
    cache = StatCache(None)
    cache.entries = {
        "kept.py": (*identity(st), "blake3:remembered"),
        "edited.py": (1, 2, 3, 4, 5, "blake3:stale"),
    }
    for algorithm in ("blake3", "sha256"):
        reads: list[int] = []
        real_read = os.read
        monkeypatch.setattr(os, "read", lambda fd, n: reads.append(n) or real_read(fd, n))  # noqa: B023
        stats: dict = {}
        rows = cache.digests(jobs, algorithm, stats)
        monkeypatch.undo()
        assert list(rows) == ["kept.py", "edited.py", "empty.py", "big.so"] and set(stats) == set(rows)
        for key in rows:
            if (key, algorithm) != ("kept.py", "blake3"):
                assert rows[key] == (disk.hash_file(str(root / key), algorithm), stats[key].st_size, 0o644)
        assert rows["kept.py"][0] == (
            "blake3:remembered" if algorithm == "blake3" else disk.hash_file(str(root / "kept.py"), "sha256")
        )
        assert set(reads) == {disk.CHUNK} and len(reads) == (
            2 + 2 + 1 + 5 if algorithm == "sha256" else 2 + 1 + 5
        )
    assert cache.digests(jobs[:1], "blake3") == {
        "kept.py": ("blake3:remembered", st.st_size, 0o644)
    }  # no hash
    with pytest.raises(AgentError, match="cannot hash with 'md5'"):
        cache.digests(jobs, "md5")


def test_a_sealed_audit_is_given_again_only_while_nothing_it_read_has_changed(baselined, monkeypatch):
    """host/seal.py: once the stat cache exists, audit_tree seals its answer with the identity of
    every entry it read; while all are unchanged the answer comes back with nothing else read, and
    any change (an in-place edit keeping size and mtime, a new pyc, a mode, a removal, a role file)
    is audited in full and found."""
    env = baselined
    from patchkeeper.host import seal
    from patchkeeper.host.contract import TreeRequest

    env.pk("snapshot", "--name", "s0")
    digest = json.loads(env.pk("status", "--json").stdout)["state"]["manifest"]
    site, state = env.site, env.state_dir
    unit = env.unit
    edit_file(unit, unit.read_bytes())  # an inode of our own: edited in place below
    monkeypatch.setattr(statcache.StatCache, "GRANULARITY_NS", -(10**12))  # seal even this fresh copy
    sealed_at = str(state / "audit" / "tree.seal")
    for cache in state.glob("statcache.json*"):
        cache.unlink()
    from patchkeeper import workspace
    from patchkeeper.checks.scan import scan_request
    from patchkeeper.targets import open_target

    target = open_target(workspace.load(env.root).target(None))
    scan = scan_request(target)  # the package's RECORD paths, its top directories, the unit file
    assert scan.absolute == {"@unit": str(unit), "@dropin": str(env.dropin)} and "sglang" in scan.walk
    request = TreeRequest(
        str(state / "store"), digest, scan, TAG, (), str(state / "audit" / "bytecode.cache"), sealed_at
    )
    first = Agent().audit_tree(request)
    assert not os.path.exists(sealed_at)  # a cold audit (no stat cache yet) pays for no seal
    assert first.files > 5000 and first.bytecode.pycs > 5000 and first.comparison.pairs == {}
    clean = Agent().audit_tree(request)
    assert clean == first and os.path.exists(sealed_at)

    def nothing_else(*args, **kwargs):
        raise AssertionError("read past the seal")

    from patchkeeper.host import compare, treecheck

    with monkeypatch.context() as m:
        m.setattr(agent_module, "check_bytecode", nothing_else)
        m.setattr(manifests, "parse", nothing_else)
        m.setattr(compare, "walk_files", nothing_else)
        m.setattr(compare.StatCache, "digests", nothing_else)
        for name in ("_beside", "_walk_pyc", "_judge"):
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
    assert [f[:2] for f in Agent().audit_tree(request).bytecode.findings] == [
        ("sglang/srt/zz_stray.pyc", "sourceless")
    ]
    stray.unlink()
    assert Agent().audit_tree(request).bytecode.findings == ()

    init = site / "sglang" / "__init__.py"
    mode = init.stat().st_mode
    edit_file(init, init.read_bytes())
    init.chmod(0o600)
    assert {
        k: (old[2], new[2]) for k, (old, new) in Agent().audit_tree(request).comparison.pairs.items()
    } == {"sglang/__init__.py": (mode & 0o777, 0o600)}
    init.chmod(mode & 0o777)

    removed = next((site / "sglang" / "srt").glob("*.py"))
    saved = removed.read_bytes()
    removed.unlink()
    assert {k: new for k, (_, new) in Agent().audit_tree(request).comparison.pairs.items()} == {
        str(removed.relative_to(site)): None
    }
    removed.write_bytes(saved)

    with open(unit, "ab") as f:
        f.write(b"# by hand\n")
    assert set(Agent().audit_tree(request).comparison.pairs) >= {"@unit"}

    # another distribution's RECORD is checked in the same call, never from the tree's seal: a file
    # of it (not below the package, no .py), edited keeping its size and mtime, is found
    with_records = replace(
        request,
        records=("pip-23.2.1.dist-info",),
        record_cache=str(state / "audit"),
        native_sites=(str(site),),
        native_cache=str(state / "env" / "native"),
    )
    assert Agent().audit_tree(with_records).records["pip-23.2.1.dist-info"].findings == ()
    assert Agent().audit_tree(with_records).records["pip-23.2.1.dist-info"].findings == ()  # sealed
    exe = site / "pip" / "_vendor" / "distlib" / "t64.exe"
    edit_file(exe, exe.read_bytes())  # an inode of our own, edited in place: no directory changes
    Agent().audit_tree(with_records)  # sealed again
    st = exe.stat()
    with open(exe, "r+b") as f:
        f.write(b"MZ by hand")
    os.utime(exe, ns=(st.st_atime_ns, st.st_mtime_ns))
    found = Agent().audit_tree(with_records)  # the tree's seal holds while the RECORD checks' identities do
    assert [f[:2] for f in found.records["pip-23.2.1.dist-info"].findings] == [
        ("pip/_vendor/distlib/t64.exe", "changed")
    ]
    with monkeypatch.context() as m:
        m.setattr(compare, "scan", nothing_else)  # then the tree from its seal again, the finding kept
        assert Agent().audit_tree(with_records) == found
    from patchkeeper.host import fingerprint  # and the native libraries, read as always

    assert found.native == fingerprint.native([str(site)], None) and any(
        k.endswith(".so") for k in found.native
    )


def test_no_seal_is_written_within_the_clock_granularity_of_a_change(env):
    """A tree changed less than the timestamp granularity ago is never sealed: an edit in the same
    tick could leave every identity as it was (the racily-clean rule)."""
    from patchkeeper.host import seal

    sealed = seal.entries(str(env.site), ("sglang",), [])  # a fresh hardlinked copy: every ctime is new
    assert sealed is None
    assert seal.entries(str(env.site / "nowhere"), ("sglang",), []) is None


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


def test_a_cold_audit_finds_same_tick_edits_and_recompiles_their_pycs(baselined, monkeypatch):
    """audit_tree with nothing cached: a same-size, same-mtime edit is found in the package (by its
    digest) and in other distributions (by their RECORD); the pyc of each such source, its header
    still matching, is recompiled and compared and found to run the old code; the native part, a
    mismatched pyc beside the package and a legacy one are found in the same call."""
    env = baselined
    env.pk("snapshot", "--name", "s0")
    _bytecode_cases(env.site)
    request = _tree_request(
        env,
        bytecode_cache=str(env.state_dir / "audit" / "bytecode.cache"),
        records=("pip-23.2.1.dist-info", "setuptools-65.5.0.dist-info"),
        record_cache=str(env.state_dir / "audit"),
        native_sites=(str(env.site),),
        native_cache=str(env.state_dir / "env" / "native"),
    )
    pairs = [str(src.relative_to(env.site)) for src, _ in _stamped(env.site, "sglang")]
    package = {
        _same_tick_edit(env.site, env.site / rel) for rel in (pairs[0], pairs[len(pairs) // 2], pairs[-1])
    }
    others = {
        name: _same_tick_edit(env.site, _stamped(env.site, name)[0][0]) for name in ("pip", "setuptools")
    }
    for cache in env.state_dir.glob("statcache.json*"):
        cache.unlink()
    found = Agent().audit_tree(request)
    assert set(found.comparison.pairs) == package
    for name, dist in (("pip", "pip-23.2.1.dist-info"), ("setuptools", "setuptools-65.5.0.dist-info")):
        assert [tuple(f[:2]) for f in found.records[dist].findings] == [(others[name], "changed")]
    mismatched = {
        rel.replace("/__pycache__", "").split(".")[0]
        for rel, kind, _ in found.bytecode.findings
        if kind == "mismatch"
    }
    assert {e[:-3] for e in [*package, *others.values()]} <= mismatched  # each one's pyc, recompiled
    assert {"sglang/version", "outside/mod"} <= mismatched
    assert found.native and any(k.endswith(".so") for k in found.native)
    assert ("sglang/legacy.pyc", "sourceless") in [tuple(f[:2]) for f in found.bytecode.findings]
    monkeypatch.setattr("patchkeeper.host.statcache.StatCache.GRANULARITY_NS", -(10**12))
    assert Agent().audit_tree(request) == found  # the same from every cache


def test_pyc_names_map_to_their_sources_as_importlib_maps_them():
    """bytecode._pyc_source, in string operations, answers as importlib.util.source_from_cache does
    (None where importlib refuses the name, or the pyc is another interpreter's)."""
    import importlib.util

    from patchkeeper.host.bytecode import _pyc_source

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
        for tail in (
            f"{TAG}.pyc",
            f"{TAG}.opt-1.pyc",
            f"{TAG}.opt-2.pyc",
            f"{TAG}.opt-.pyc",
            f"{TAG}.opt-x1.pyc",
            f"{TAG}.opt-1.x.pyc",
            f"{TAG}.x.pyc",
            "cpython-27.pyc",
            "pyc",
            f"{TAG}.opt-a_b.pyc",
        ):
            for head in (
                "",
                "__pycache__/",
                "a/__pycache__/",
                "a/b/__pycache__/",
                "a/",
                "x__pycache__/",
                "__pycache__/__pycache__/",
                "a.b/__pycache__/",
            ):
                names.append(f"{head}{stem}.{tail}")
    assert len(names) > 300
    for rel in names:
        assert _pyc_source(rel, TAG) == importlib_answer(rel), rel


def test_install_records_of_an_old_manifest_are_left_out_of_its_comparison(tmp_path):
    """States recorded before install records were left out had them: a comparison leaves them out.
    disk.install_records finds them by one search of the keys' text when there are none, else
    exactly those (a RECORD outside a top-level .dist-info directory is none)."""
    from patchkeeper.host import disk
    from patchkeeper.host.contract import CompareRequest
    from patchkeeper.records.manifest import Manifest

    keys = [
        "pkg/a.py",
        "pkg-1.dist-info/RECORD",
        "pkg-1.dist-info/METADATA",
        "pkg/sub.dist-info/RECORD",
        "pkg-1.dist-info/direct_url.json",
        "pkg/RECORD",
        "pkg-1.dist-info/RECORD.jws",
    ]
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
    disk.hash_file(str(big))
    assert reads == [1 << 20] * 4


def test_a_warm_audit_from_both_seals_still_sees_a_file_changed_in_place(baselined, monkeypatch):
    """The RECORD seals of other distributions and the tree's seal name the same .py and .pyc files
    (every one below the site dir is a bytecode input): a warm audit is given from both seals, with no
    RECORD checked again, and a file of another distribution changed in place is still seen."""
    env = baselined
    from patchkeeper import workspace
    from patchkeeper.checks.scan import scan_request
    from patchkeeper.host import distcheck
    from patchkeeper.host.contract import TreeRequest
    from patchkeeper.targets import open_target

    env.pk("snapshot", "--name", "s0")
    digest = json.loads(env.pk("status", "--json").stdout)["state"]["manifest"]
    state = env.state_dir
    monkeypatch.setattr(statcache.StatCache, "GRANULARITY_NS", -(10**12))  # seal even this fresh copy
    target = open_target(workspace.load(env.root).target(None))
    others = tuple(sorted(p.name for p in env.site.glob("*.dist-info") if not p.name.startswith("sglang-")))
    assert others  # pip's and setuptools'
    request = TreeRequest(
        str(state / "store"),
        digest,
        scan_request(target),
        TAG,
        (),
        str(state / "audit" / "bytecode.cache"),
        str(state / "audit" / "tree.seal"),
        others,
        str(state / "audit"),
    )
    for _ in range(3):  # the stat cache, then both seals
        first = Agent().audit_tree(request)
    with monkeypatch.context() as m:
        m.setattr(distcheck, "check_record", lambda *a, **k: pytest.fail("a RECORD checked past its seal"))
        m.setattr(treecheck_module, "_beside", lambda *a, **k: pytest.fail("the tree read past its seal"))
        again = Agent().audit_tree(request)
    assert again == first and first.records and all(not r.findings for r in first.records.values())

    pip_file = env.site / "pip" / "__init__.py"
    edit_file(pip_file, pip_file.read_bytes() + b"# by hand\n")
    found = Agent().audit_tree(request).records
    assert [f[:2] for r in found.values() for f in r.findings] == [("pip/__init__.py", "changed")]

    # the tree's seal leaves the files the RECORD checks stat to them (one stat per file of both):
    # a pyc of pip that RECORD lists, replaced by a foreign one whose header matches, is still judged
    marker = (
        state / "baseline-marker"
    )  # as the baseline's ledger entry dates it: pycs written since are compared
    marker.write_text("")
    request = replace(request, pycs_since=str(marker))
    for _ in range(3):
        Agent().audit_tree(request)  # both seals written again
    sealed = marshal.loads((state / "audit" / "tree.seal").read_bytes())[2].split("\0")
    pyc = env.site / "pip" / "__pycache__" / "__main__.cpython-311.pyc"
    record = (next(env.site.glob("pip-*.dist-info")) / "RECORD").read_text()
    assert "pip/__pycache__/__main__.cpython-311.pyc" in record and str(pyc) not in sealed
    assert str(env.site / "pip" / "__main__.py") not in sealed and str(env.site / "pip") in sealed
    source = env.site / "pip" / "__main__.py"
    head = pyc.read_bytes()[:16]
    other = compile(source.read_bytes() + b"\nX = 1\n", str(source), "exec", dont_inherit=True)
    pyc.unlink()
    pyc.write_bytes(head + marshal.dumps(other))  # the header still matches pip/__main__.py
    found = Agent().audit_tree(request)
    assert [f[:2] for f in found.bytecode.findings] == [
        ("pip/__pycache__/__main__.cpython-311.pyc", "mismatch")
    ]
