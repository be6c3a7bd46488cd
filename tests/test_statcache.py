"""The rule every cache obeys (host/statcache.py): a cache file is believed only when it and its
directory belong to the user running the command (or root) and no one else may write them, else it is
ignored with one warning per command; every cache identity holds the file's device (an image swapped
at the same mount point keeps size, mtime, ctime and inode); caches hold data, never code."""

from __future__ import annotations

import array
import json
import marshal
import os
import types
from pathlib import Path

import pytest

from patchkeeper.host import seal, statcache
from patchkeeper.host.agent import Agent
from patchkeeper.host.contract import ScanRequest
from patchkeeper.host.statcache import Listings, StatCache, identity

WARNING = "patchkeeper: warning: cache "


@pytest.fixture(autouse=True)
def _warn_again(monkeypatch):
    """Each test is a command of its own: one warning each."""
    monkeypatch.setattr(statcache, "_warned", [])


def _scan(env, monkeypatch) -> tuple[ScanRequest, dict, Path]:
    """A warm scan of the package whose stat cache remembers every file (even this fresh copy)."""
    monkeypatch.setattr(StatCache, "GRANULARITY_NS", -(10**12))
    cache = env.state_dir / "statcache.json"
    request = ScanRequest(root=str(env.site), walk=("sglang",), cache=str(cache))
    return request, Agent().scan(request).rows, cache


def _poison(cache: Path, rel: str, dev: int | None = None) -> str:
    """Put a wrong digest in the stat cache for `rel` (and, given, another device in its identity):
    what a scan answers for `rel` then says whether it believed the cache."""
    stamp, entries = marshal.loads(cache.read_bytes())
    size, mtime, ctime, ino, device, digest = entries[rel]
    wrong = digest.partition(":")[0] + ":" + "0" * 64
    entries[rel] = (size, mtime, ctime, ino, device if dev is None else dev, wrong)
    cache.write_bytes(marshal.dumps((stamp, entries)))
    return wrong


def test_a_cache_whose_device_changed_is_not_believed(env, monkeypatch):
    """The stat cache: an entry whose identity differs only in the device (an image swapped in at the
    same path keeps size, mtime, ctime and inode) is hashed again. The same edit with the device kept
    is believed: the cache is read, and the device is what refused it."""
    request, rows, cache = _scan(env, monkeypatch)
    rel = "sglang/version.py"
    wrong = _poison(cache, rel)
    assert Agent().scan(request).rows[rel][0] == wrong  # believed: the identity holds
    st = os.lstat(env.site / rel)
    _poison(cache, rel, dev=st.st_dev + 1)
    assert Agent().scan(request).rows[rel] == rows[rel]  # another device: hashed again


def test_a_seal_whose_device_changed_is_not_believed(env, monkeypatch):
    """A tree's seal (seal.py): every entry's identity is checked with its device."""
    root = env.site / "sglang" / "lang"
    monkeypatch.setattr(StatCache, "GRANULARITY_NS", -(10**12))
    sealed = seal.entries(str(root), (), [])
    assert sealed is not None
    path = str(env.state_dir / "test.seal")
    seal.save(path, "key", sealed, {"answer": 1})
    assert seal.load(path, "key") == {"answer": 1}
    stamp, key, names, ids, answer = marshal.loads(Path(path).read_bytes())
    values = array.array("q", ids)
    assert values[4] == os.lstat(root).st_dev
    values[4] += 1  # the first entry's device
    Path(path).write_bytes(marshal.dumps((stamp, key, names, values.tobytes(), answer)))
    assert seal.load(path, "key") is None


def test_the_ledger_index_rereads_an_entry_whose_device_changed(baselined, monkeypatch):
    """The ledger index (~/.cache/patchkeeper/ledgers): an entry whose file's remembered identity
    differs only in the device is read again from the ledger."""
    env = baselined
    from patchkeeper.records.ledger import Ledger
    from patchkeeper.targets import open_target
    from patchkeeper.workspace import load

    env.pk("snapshot", "--name", "s0")
    monkeypatch.setattr(StatCache, "GRANULARITY_NS", -(10**12))  # remember even these fresh entries

    def read() -> tuple[int, list]:
        target = open_target(load(env.root).target(None))
        try:
            ledger = Ledger(target)
            names = [e.after.name for e in ledger.entries()]
            return ledger.files_read, names
        finally:
            target.close()

    read()
    files_read, names = read()
    assert files_read == 0 and names[-1] == "s0"  # every entry from the index
    index = next(Path(statcache.user_cache("ledgers")).iterdir())
    stamp, kept = marshal.loads(index.read_bytes())
    name = max(kept)
    ident, seq, entry_id, facts, blob = kept[name]
    doc = marshal.loads(blob)
    doc["after"] = dict(doc["after"], name="from-the-index")
    kept[name] = (ident, seq, entry_id, facts, marshal.dumps(doc))
    index.write_bytes(marshal.dumps((stamp, kept)))
    assert read() == (0, [*names[:-1], "from-the-index"])  # believed: the identity holds
    kept[name] = ((*ident[:4], ident[4] + 1), seq, entry_id, facts, marshal.dumps(doc))
    index.write_bytes(marshal.dumps((stamp, kept)))
    files_read, names = read()
    assert files_read == 1 and names[-1] == "s0"  # another device: read again


def test_a_cache_file_of_another_user_is_ignored_with_a_warning(env, monkeypatch, capsys):
    if os.geteuid() != 0:
        pytest.skip("giving a file to another uid needs root (os.chown)")
    request, rows, cache = _scan(env, monkeypatch)
    rel = "sglang/version.py"
    wrong = _poison(cache, rel)
    os.chown(cache, 65534, 65534)
    assert Agent().scan(request).rows[rel] == rows[rel]  # not believed
    err = capsys.readouterr().err
    assert err.count(WARNING) == 1 and f"{cache} ignored: it belongs to uid 65534" in err
    os.chown(cache, 0, 0)
    _poison(cache, rel)
    assert Agent().scan(request).rows[rel][0] == wrong  # root's own: believed


@pytest.mark.parametrize("where", ["file", "directory"])
def test_a_cache_others_may_write_is_ignored_with_a_warning(env, monkeypatch, capsys, where):
    request, rows, cache = _scan(env, monkeypatch)
    rel = "sglang/version.py"
    _poison(cache, rel)
    loose = cache if where == "file" else cache.parent
    mode = loose.stat().st_mode & 0o7777
    loose.chmod(mode | 0o020)  # group-writable
    try:
        assert Agent().scan(request).rows[rel] == rows[rel]  # not believed
    finally:
        loose.chmod(mode)
    err = capsys.readouterr().err
    assert err.count(WARNING) == 1 and f"{loose} ignored" in err and "others may write it" in err


def test_a_symlinked_cache_is_ignored(env, monkeypatch, capsys):
    request, rows, cache = _scan(env, monkeypatch)
    rel = "sglang/version.py"
    _poison(cache, rel)
    elsewhere = cache.with_name("elsewhere")
    cache.rename(elsewhere)
    cache.symlink_to(elsewhere)
    assert Agent().scan(request).rows[rel] == rows[rel]
    assert capsys.readouterr().err.count(WARNING) == 1


def test_one_warning_per_command_however_many_caches_are_ignored(env):
    """A real command finds several caches it may not trust: it warns once, and answers as a cold run."""
    env.pk("audit", "-q")
    env.pk("audit", "-q")
    caches = [p for p in env.state_dir.rglob("*") if p.is_file() and _is_cache(p)]
    assert len(caches) > 3
    for p in caches:
        p.chmod(0o666)
    proc = env.pk("audit", "-q")
    assert proc.stderr.count(WARNING) == 1
    assert proc.stdout == env.pk("audit", "-q").stdout  # (rewritten 0600: believed again, no warning)


def _is_cache(path: Path) -> bool:
    rel = path.parts[len(path.parts) - 3 :]
    return path.name.startswith("statcache.json") or "audit" in rel or "manifest-cache" in rel or "env" in rel


def _walk(value: object) -> None:
    """Every value inside plain data: no code object, nor anything but data."""
    if isinstance(value, types.CodeType):
        raise AssertionError("a code object in a cache")
    if isinstance(value, dict):
        for k, v in value.items():
            _walk(k)
            _walk(v)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for v in value:
            _walk(v)
    else:
        assert isinstance(value, (str, bytes, int, float, bool, type(None))), type(value)


def test_caches_hold_data_only_and_are_private(baselined):
    """After the verbs that write caches, every cache file (the state dir's and the user's) is JSON or
    marshal of plain data, mode 0600, in a directory no one else may write."""
    env = baselined
    env.pk("audit", "-q")
    env.pk("apply", "ddtree", "--no-verify")
    env.pk("audit", "-q", check=None)
    env.pk("rollback", "--to", "baseline", "--no-verify")
    env.pk("log")
    user = Path(os.environ["HOME"]) / ".cache" / "patchkeeper"
    found = [p for p in env.state_dir.rglob("*") if p.is_file() and _is_cache(p)]
    found += [p for p in user.rglob("*") if p.is_file()]
    assert len(found) > 10 and any(p.is_relative_to(user) for p in found)
    for path in found:
        data = path.read_bytes()
        try:
            _walk(json.loads(data))
        except ValueError:
            _walk(marshal.loads(data))
        assert path.stat().st_mode & 0o777 == 0o600, path
        assert statcache.untrusted(path.parent.stat()) is None, path.parent


def test_identity_is_what_the_caches_compare():
    st = os.stat(__file__)
    assert identity(st) == (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)
    assert Listings.FORMAT != StatCache.FORMAT  # a listing is never read as a digest, nor the reverse
