"""Binary patches (`GIT binary patch`) cannot take the host's memory: a zlib bomb behind a small
declared size and a delta that builds past its declared result are refused as soon as they pass it,
through the real CLI, its peak memory measured (and capped, so that a regression fails, not the host)."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from patchkeeper.errors import BadInput
from patchkeeper.patchset import gitbinary, gitdiff

LIMIT = 1 << 30  # the address space the CLI gets: the bombs below inflate to 2 GiB
PEAK = 300 << 20  # what the CLI may use refusing them (it starts at about 60 MB)


def zlib_bomb(mib: int) -> bytes:
    """A valid zlib stream of `mib` MiB of zero bytes, about 1 KB a MiB, made without holding them:
    after a full flush deflate's output for the same MiB repeats, then an empty last block and the
    Adler-32 of n zero bytes ((n mod 65521) << 16 | 1)."""
    z = zlib.compressobj(9)
    zeros = bytes(1 << 20)
    first = z.compress(zeros) + z.flush(zlib.Z_FULL_FLUSH)
    again = z.compress(zeros) + z.flush(zlib.Z_FULL_FLUSH)
    n = mib << 20
    return first + again * (mib - 1) + b"\x03\x00" + ((n % 65521) << 16 | 1).to_bytes(4, "big")


def git_base85(data: bytes) -> list[str]:
    """git's base85 lines: 52 bytes a line, led by A-Z (1-26) or a-z (27-52), alphabet RFC 1924's."""
    out = []
    for at in range(0, len(data), 52):
        chunk = data[at : at + 52]
        n = len(chunk)
        out.append(
            (chr(ord("A") + n - 1) if n <= 26 else chr(ord("a") + n - 27))
            + base64.b85encode(chunk, pad=True).decode()
        )
    return out


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _sha1_blob(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _binary_diff(
    path: str, old: bytes | None, method: str, size: int, payload: bytes, new_id: str = "1" * 40
) -> str:
    old_id = _sha1_blob(old) if old is not None else "0" * 40
    head = f"diff --git a/{path} b/{path}\n" + ("new file mode 100644\n" if old is None else "")
    return (
        head
        + f"index {old_id}..{new_id}\nGIT binary patch\n{method} {size}\n"
        + "\n".join(git_base85(payload))
        + "\n\nliteral 0\nHcmV?d00001\n\n"
    )


def _patchset(env, name: str, diff: str) -> None:
    d = env.root / "patchsets" / name
    d.mkdir()
    (d / "patchset.toml").write_text(f'name = "{name}"\nversion = "1.0.0"\npackage = "sglang"\n')
    (d / f"{name}.patch").write_text(diff)


def _measured(env, *args: str) -> tuple[subprocess.CompletedProcess, int]:
    """The CLI run under an address-space limit of LIMIT; its exit, output and peak resident bytes."""
    runner = (
        "import resource, subprocess, sys\n"
        f"limit = {LIMIT}\n"
        "cap = lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
        "p = subprocess.run(sys.argv[1:], preexec_fn=cap, capture_output=True, text=True)\n"
        "sys.stdout.write(p.stdout + '\\0' + p.stderr + '\\0' + str(p.returncode) + '\\0')\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    cmd = [sys.executable, "-m", "patchkeeper", "--workspace", str(env.root), *args]
    proc = subprocess.run([sys.executable, "-c", runner, *cmd], capture_output=True, text=True, check=True)
    out, err, code, peak = proc.stdout.split("\0")
    return subprocess.CompletedProcess(cmd, int(code), out, err), int(peak) << 10


def _big_site_file(env) -> Path:
    """A file of the real package of at least 64 KiB (a delta copy op without size bytes copies 64 KiB)."""
    for dirpath, _, filenames in os.walk(env.site / "sglang"):
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if p.stat().st_size >= 1 << 16 and not name.endswith(".pyc"):
                return p
    pytest.fail("no file of 64 KiB in the package")


def test_a_literal_zlib_bomb_is_refused_as_soon_as_it_passes_its_declared_size(baselined):
    env = baselined
    bomb = zlib_bomb(2048)  # 2 GiB of zeros in 2 MB of zlib
    assert len(bomb) < 3 << 20
    _patchset(env, "bomb", _binary_diff("sglang/bomb.bin", None, "literal", 16, bomb))
    before = env.snapshot()
    proc, peak = _measured(env, "apply", "bomb", "--no-verify")
    assert proc.returncode == 2, proc.stderr
    assert "corrupt binary patch: it inflates past the 16 bytes it declares" in proc.stderr, proc.stderr
    assert proc.stderr.count("patchkeeper: error:") == 1 and "Traceback" not in proc.stderr
    assert peak < PEAK, f"peak {peak >> 20} MiB"
    assert env.snapshot() == before


def test_a_delta_bomb_is_refused_as_soon_as_it_builds_past_its_declared_result(baselined):
    env = baselined
    target = _big_site_file(env)
    old = target.read_bytes()
    delta = _varint(len(old)) + _varint(16) + b"\x80" * 32768  # 32768 copies of 64 KiB: 2 GiB
    payload = zlib.compress(delta, 9)
    assert len(payload) < 200
    rel = target.relative_to(env.site).as_posix()
    _patchset(env, "dbomb", _binary_diff(rel, old, "delta", len(delta), payload))
    before = env.snapshot()
    proc, peak = _measured(env, "apply", "dbomb", "--no-verify")
    assert proc.returncode == 2, proc.stderr
    assert "corrupt binary delta: the delta builds past the 16 bytes it declares" in proc.stderr, proc.stderr
    assert proc.stderr.count("patchkeeper: error:") == 1 and "Traceback" not in proc.stderr
    assert peak < PEAK, f"peak {peak >> 20} MiB"
    assert env.snapshot() == before


def _literal(payload: bytes, size: int) -> gitbinary.BinaryPatch:
    return gitbinary.BinaryPatch("literal", size, tuple(git_base85(payload)), "0" * 40, "1" * 40)


@pytest.mark.parametrize(
    "payload, size, error",
    [
        (zlib.compress(b"x" * 100), 99, "it inflates past the 99 bytes it declares"),
        (zlib.compress(b"x" * 100), 101, "100 bytes inflated, 101 declared"),
        (zlib.compress(b"x" * 100)[:-6], 100, "the zlib stream ends early"),
        (zlib.compress(b"x" * 3_000_000), 2_999_999, "it inflates past"),
        (zlib.compress(b"x" * 3_000_000)[:40], 3_000_000, "the zlib stream ends early"),
        (b"\x78\x9c\xff\xff" + bytes(20), 10, "Error -3"),
    ],
)
def test_inflate_refuses_each_lie_about_the_size(payload, size, error):
    with pytest.raises(Exception) as info:
        gitbinary.decode(_literal(payload, size), "x.bin")
    assert error in str(info.value)
    assert gitbinary.decode(_literal(zlib.compress(b"x" * 100), 100), "x.bin") == b"x" * 100


def test_a_declared_size_over_the_cap_is_refused_before_inflating():
    with pytest.raises(Exception, match="declares 2147483648 bytes, over the 1024 MiB"):
        gitbinary.decode(_literal(zlib.compress(b"x"), 1 << 31), "x.bin")


@pytest.mark.parametrize(
    "ops, error",
    [
        (b"\x91\x08\x08", "copies past the end of the file"),  # offset 8, 8 bytes of a 10-byte source
        (b"\x91\x00\x20", "copies past the end of the file"),
        (b"\x05hello\x05world", "builds past the 8 bytes it declares"),
        (b"\x90\x06\x90\x06", "builds past the 8 bytes it declares"),
        (b"\x03abc", "the delta gives 3 bytes, 8 declared"),
        (b"\x09abc", "the delta ends inside an insert"),
        (b"\x00", "reserved opcode 0"),
    ],
)
def test_apply_delta_refuses_out_of_range_copies_and_overlong_results(ops, error):
    source = b"0123456789"
    with pytest.raises(ValueError, match=error):
        gitbinary.apply_delta(source, _varint(len(source)) + _varint(8) + ops)
    assert gitbinary.apply_delta(source, _varint(10) + _varint(8) + b"\x91\x02\x06\x02ab") == b"234567ab"


def test_a_declared_result_over_the_cap_is_refused_before_building():
    with pytest.raises(ValueError, match="declares a result of 2147483648 bytes"):
        gitbinary.apply_delta(b"ab", _varint(2) + _varint(1 << 31) + b"\x02ab")


def test_the_bombs_are_what_git_reads(tmp_path):
    """The encoding the tests use is git's: git apply takes a literal made by it, and zlib takes the
    bomb whole (a small one)."""
    assert zlib.decompress(zlib_bomb(3)) == bytes(3 << 20)
    data = bytes(range(256)) * 3 + b"tail"
    diff = _binary_diff("x.bin", None, "literal", len(data), zlib.compress(data), _sha1_blob(data))
    (tmp_path / "x.patch").write_text(diff)
    subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True)
    subprocess.run(["git", "apply", str(tmp_path / "x.patch")], cwd=tmp_path / "repo", check=True)
    assert (tmp_path / "repo" / "x.bin").read_bytes() == data


def test_binary_patches_over_the_total_are_refused_before_inflating(env):
    """The reviewer's case, scaled to the 1 GiB address space of the run: literals each under the 1 GiB
    a file may declare, 1.2 GiB in all, over two .patch files (each under the total alone)."""
    bomb = zlib_bomb(300)
    for part in ("0001", "0002"):
        diff = "".join(
            _binary_diff(f"sglang/z{part}-{i}.bin", None, "literal", 300 << 20, bomb) for i in (1, 2)
        )
        if part == "0001":
            _patchset(env, "big", diff)
        else:
            (env.root / "patchsets/big/0002.patch").write_text(diff)
    before = env.snapshot()
    for verb in ("check", "apply"):
        proc, peak = _measured(env, verb, "big")
        assert proc.returncode == 2, proc.stderr
        assert f"declare {1200 << 20} bytes in all, over the 1024 MiB" in proc.stderr, proc.stderr
        assert proc.stderr.count("patchkeeper: error:") == 1 and "Traceback" not in proc.stderr
        assert peak < PEAK, f"peak {peak >> 20} MiB"
    assert env.snapshot() == before


def _two_files(first: str, second: str) -> str:
    return first + second.replace("a/x.bin", "a/y.bin").replace("b/x.bin", "b/y.bin")


def test_reverse_chunks_and_delta_results_count_in_the_total(monkeypatch):
    """What the total counts: forward chunks, reverse chunks (decoded while reading, so counted before
    any is) and the result a delta declares (read from its first bytes)."""
    monkeypatch.setattr(gitbinary, "MAX_TOTAL", 1000)
    decoded: list[int] = []
    real = gitbinary.decode
    monkeypatch.setattr(gitbinary, "decode", lambda p, w: decoded.append(p.size) or real(p, w))
    fits = _binary_diff("x.bin", None, "literal", 400, zlib.compress(bytes(400)))
    assert len(gitdiff.parse(_two_files(fits, fits), "ok.patch")) == 2 and decoded == [0, 0]
    reverse = fits.replace(
        "literal 0\nHcmV?d00001\n", "literal 400\n" + "\n".join(git_base85(zlib.compress(bytes(400)))) + "\n"
    )
    decoded.clear()
    with pytest.raises(BadInput, match="declare 1600 bytes in all, over the"):
        gitdiff.parse(_two_files(reverse, reverse), "rev.patch")
    assert decoded == []  # refused before the first reverse chunk is inflated
    old = b"0123456789"
    delta = zlib.compress(_varint(len(old)) + _varint(900) + b"\x91\x00\x0a" * 90)
    grows = _binary_diff("x.bin", old, "delta", 2 + 2 + 3 * 90, delta)
    with pytest.raises(BadInput, match=f"declare {400 + 274 + 900} bytes in all"):
        gitdiff.parse(_two_files(fits, grows), "delta.patch")
    with pytest.raises(BadInput, match="corrupt binary delta"):
        gitbinary.held(gitbinary.BinaryPatch("delta", 5, tuple(git_base85(b"xx")), "0" * 40, "1" * 40), "d")


def test_a_large_file_no_patch_names_is_hashed_a_piece_at_a_time(env):
    """A file of a patch set directory that no patch references (a 1.5 GiB notes.bin, sparse here) is
    part of the set's digest: it is read a piece at a time, not whole (the run has 1 GiB of address space)."""
    _patchset(
        env,
        "notes",
        _binary_diff("sglang/n.bin", None, "literal", 4, zlib.compress(b"abcd"), _sha1_blob(b"abcd")),
    )
    with open(env.root / "patchsets/notes/notes.bin", "wb") as f:
        f.truncate(1536 << 20)
    proc, peak = _measured(env, "show", "notes")
    assert proc.returncode == 0, proc.stderr
    assert "notes.bin" in proc.stdout
    assert peak < PEAK, f"peak {peak >> 20} MiB"
