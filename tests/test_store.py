"""The content-addressed store: write once, verify on read, never hand out a corrupt object."""

from __future__ import annotations

import os

import pytest

from patchkeeper.host.disk import AgentError, hash_bytes
from patchkeeper.host.store import Store


def _corrupt(path: str) -> None:
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.write(b"X")


def test_objects_are_read_only_verified_and_deduplicated(tmp_path):
    store = Store(str(tmp_path))
    digest = store.put(b"hello\n")
    assert digest == hash_bytes(b"hello\n") and store.get(digest) == b"hello\n"
    path = store._loose(digest)
    assert os.stat(path).st_mode & 0o777 == 0o444
    assert (
        store.put(b"hello\n") == digest and len(list((tmp_path / "objects").rglob("*"))) == 3
    )  # algo/ab/obj
    with pytest.raises(AgentError, match="digest-mismatch|hash to"):
        store.put(b"hello\n", hash_bytes(b"other"))


def test_a_corrupt_object_is_an_error_and_a_later_put_of_the_bytes_mends_it(tmp_path):
    store = Store(str(tmp_path))
    digest = store.put(b"payload " * 100)
    _corrupt(store._loose(digest))
    with pytest.raises(AgentError, match="corrupt"):
        store.get(digest)
    store.put(b"payload " * 100)
    assert store.get(digest) == b"payload " * 100


def test_packs_are_indexed_and_verified(tmp_path):
    files = {}
    for i in range(5):
        p = tmp_path / f"f{i}"
        p.write_bytes(f"file {i}\n".encode() * 50)
        files[hash_bytes(p.read_bytes())] = str(p)
    store = Store(str(tmp_path / "store"))
    assert store.put_files(files) == {}
    assert all(Store(str(tmp_path / "store")).get(d) == open(p, "rb").read() for d, p in files.items())
    assert len(list((tmp_path / "store" / "packs").glob("*.pack"))) == 1


def test_packing_skips_what_the_store_already_holds_loose_or_packed(tmp_path):
    """put_files packs only new bytes: objects already stored loose (found by one listing per object
    directory) or in an earlier pack are left out of the new pack."""
    store = Store(str(tmp_path / "store"))
    src = tmp_path / "src"
    src.mkdir()
    paths = {}
    for name in ("loose", "packed", "new"):
        (src / name).write_bytes(name.encode() * 100)
        paths[name] = (hash_bytes((src / name).read_bytes()), str(src / name))
    store.put((src / "loose").read_bytes())
    assert store.put_files(dict([paths["packed"]])) == {}
    before = set(os.listdir(tmp_path / "store" / "packs"))
    assert store.put_files(dict(paths.values())) == {}
    new = [n for n in os.listdir(tmp_path / "store" / "packs") if n not in before and n.endswith(".idx")]
    index = __import__("json").loads((tmp_path / "store" / "packs" / new[0]).read_bytes())
    assert list(index) == [paths["new"][0]]
    assert all(Store(str(tmp_path / "store")).get(d) == (src / n).read_bytes() for n, (d, _) in paths.items())


def test_a_pack_index_is_read_as_it_is_now(tmp_path, monkeypatch):
    """What a pack index says is said (an index rewritten in place with other rows: the object read
    by them fails its digest), and a damaged index is an error that names it; no copy of it is kept."""
    import json

    from patchkeeper.host import statcache

    monkeypatch.setattr(statcache.StatCache, "GRANULARITY_NS", -(10**12))  # every file as if written long ago

    files = {}
    for i in range(3):
        p = tmp_path / f"f{i}"
        p.write_bytes(f"file {i}\n".encode() * 50)
        files[hash_bytes(p.read_bytes())] = str(p)
    root = tmp_path / "state" / "store"
    assert Store(str(root)).put_files(files) == {}
    digest = next(iter(files))
    assert Store(str(root)).get(digest) == open(files[digest], "rb").read()
    assert sorted(os.listdir(tmp_path / "state")) == ["store"]  # no copy of the index beside it (issue 31)
    index = next((root / "packs").glob("*.idx"))
    rows = json.loads(index.read_bytes())
    os.chmod(index, 0o644)
    index.write_text(json.dumps({d: [0, 1] for d in rows}))  # rewritten in place: other rows
    with pytest.raises(
        AgentError, match="corrupt"
    ):  # its rows are believed, and the object read by them fails
        Store(str(root)).get(digest)
    index.write_text("{not json")  # damaged in place
    with pytest.raises(AgentError, match="is damaged"):
        Store(str(root)).get(digest)
