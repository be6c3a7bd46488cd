"""A state dir's stored manifests are data: beside each key (test_manifest_keys.py), a row's mode and size
have a grammar too (host/manifest_text.py), which parse checks before any plan or write. A hostile state
dir whose manifest gives a file mode 4755 once made `rollback` restore it setuid; now it is refused
(exit 2, one line and a hint) and nothing changes. The grammar is what the recorder writes: permission
bits only (sglang ships 0o755 files, which must still roll back), and a file with a setuid, setgid or
sticky bit is not recorded at all, so no state the tool records is one it refuses to read."""

from __future__ import annotations

import os
import random
import re
import stat
from collections.abc import Callable

import pytest
from conftest import chmod_file, copy_venv, edit_file, every_path, make_workspace
from helpers import plant_manifests, put_back_ledger, stat_identities

from patchkeeper.change.transaction import FileOp
from patchkeeper.host import manifest_text
from patchkeeper.targets import shapes

DIGEST = "blake3:" + "ab" * 32
HOSTILE_MODES = ["4755", "2755", "1755", "6755", "7777", "4000", "1000", "100644", "100755", "40755", "10000",
                 "-644", "-0", "0o644", "+644", "0644", "00", "8", "9", "64a", " 644", "644 ", "\t644", "1_0",
                 "６４４", "٦٤٤", "7" * 5000, "1" * 40, ""]  # fmt: skip
HOSTILE_SIZES = ["-1", "-0", "+1", "1_000", "0x10", "1e3", "01", "00", "", " 1", "١٢", "NaN", "inf",
                 str(2**63), "9" * 19, "9" * 5000]  # fmt: skip
GOOD_SIZES = ["0", "1", "12", str(2**63 - 1), "1" + "0" * 18]


def _reference(mode: str, size: str) -> bool:
    """The grammar, stated on its own: the mode as write_rows writes 0 to 0o777, a decimal size below 2**63."""
    return bool(
        re.fullmatch(r"0|[1-7][0-7]{0,2}", mode, re.ASCII)
        and re.fullmatch(r"0|[1-9][0-9]*", size, re.ASCII)
        and int(size) < 2**63
    )


def _line(mode: str, size: str, key: str = "sglang/x.py") -> bytes:
    return f"{mode} {size} {DIGEST} {key}\n".encode("utf-8", "surrogateescape")


# ---- the grammar ---------------------------------------------------------------------------------------
def test_every_mode_the_recorder_writes_parses_back_and_no_other():
    good = manifest_text.write_rows({f"k{m:04o}": (DIGEST, m, m) for m in range(0o1000)})
    assert {r[2] for r in manifest_text.parse(good).values()} == set(range(0o1000))
    for size in GOOD_SIZES:
        assert manifest_text.parse(_line("755", size)) == {"sglang/x.py": (DIGEST, int(size), 0o755)}
    for mode in HOSTILE_MODES:
        with pytest.raises(
            ValueError, match="mode .* is not a recorded file's|is not a file's|is not MODE SIZE"
        ):
            manifest_text.parse(_line("644", "1", "sglang/a.py") + _line(mode, "1"))
    for size in HOSTILE_SIZES:
        with pytest.raises(ValueError, match="size .* is not a file's|is not MODE SIZE"):
            manifest_text.parse(_line("644", size))


def test_a_generated_corpus_parses_exactly_as_the_grammar_says():
    """Modes and sizes made of digits, signs, prefixes and other scripts' digits: parse accepts a row
    exactly when the grammar stated on its own (_reference) does."""
    rng = random.Random(47)
    parts = ["0", "1", "4", "6", "7", "8", "9", "-", "+", "_", "o", "x", "e", "\t", "٤", "７", "00", "7777"]
    accepted = 0
    for _ in range(4000):
        mode = "".join(rng.choice(parts) for _ in range(rng.randint(0, 4)))
        size = "".join(rng.choice(parts) for _ in range(rng.randint(0, 5)))
        if rng.random() < 0.6:
            mode = f"{rng.randrange(0o1000):o}"
        if rng.random() < 0.6:
            size = str(
                rng.choice([0, 1, 2**63 - 1, 2**63, 2**64, -1, rng.randrange(10**9)]) + rng.randint(-2, 2)
            )
        try:
            manifest_text.parse(_line(mode, size))
            ok = True
        except ValueError:
            ok = False
        assert ok == _reference(mode, size), (mode, size)
        accepted += ok
    assert 500 < accepted < 3500  # the corpus holds both kinds


@pytest.mark.parametrize(
    "row", [(DIGEST, 1, 0o4755), (DIGEST, 1, 0o2644), (DIGEST, 1, 0o1644), (DIGEST, 1, 0o100644),
            (DIGEST, 1, -1), (DIGEST, 1, 2**100), (DIGEST, 1, True), (DIGEST, 1, "644"), (DIGEST, -1, 0o644),
            (DIGEST, 2**63, 0o644), (DIGEST, 1.0, 0o644), (DIGEST, None, 0o644)]
)  # fmt: skip
def test_the_controller_and_the_journal_refuse_a_row_with_a_hostile_mode_or_size(row):
    """A host's answer (a hostile host, another agent's version) and a journal's op are checked as a
    parsed manifest is."""
    assert manifest_text.values_problem({"sglang/a.py": (DIGEST, 1, 0o755), "sglang/x.py": row})
    with pytest.raises(shapes.Malformed):
        shapes.answer("manifest_rows", {"sglang/a.py": (DIGEST, 1, 0o755), "sglang/x.py": row})
    with pytest.raises(ValueError):
        FileOp.from_dict({"key": "sglang/x.py", "path": "/v/sglang/x.py", "old": None, "new": list(row)})
    shapes.answer("manifest_rows", {"sglang/a.py": (DIGEST, 1, 0o755), "sglang/x.py": (DIGEST, 0, 0o644)})


def _row_rewritten(key: bytes, mode: str | None, size: str | None) -> Callable[[bytes], bytes]:
    """A manifest's text with the row of `key` given `mode` and `size` where they are not None."""
    row = re.compile(rb"^(\S+) (\S+) (\S+) " + re.escape(key) + rb"$", re.M)

    def one(m: re.Match[bytes]) -> bytes:
        new_mode = m[1] if mode is None else mode.encode()
        return b"%s %s %s %s" % (new_mode, m[2] if size is None else size.encode(), m[3], key)

    return lambda text: row.sub(one, text)


# ---- end to end: the round trip of what the tool records, and a hostile state dir ------------------------
def test_recorded_modes_roll_back_and_hostile_ones_are_refused_changing_nothing(tmp_path, pristine_venv):
    env = make_workspace(tmp_path / "ws", copy_venv(pristine_venv, tmp_path / "venv"))
    exe = next(p for p in sorted((env.site / "sglang").rglob("*.py")) if p.stat().st_mode & 0o111)
    plain = env.site / "sglang" / "README.md"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "canary").write_bytes(b"CANARY\n")
    env.pk("snapshot", "--name", "base")

    # the round trip: an executable file and a plain one, their modes and bytes swapped by hand, come back
    modes = {exe: stat.S_IMODE(exe.stat().st_mode), plain: stat.S_IMODE(plain.stat().st_mode)}
    assert modes == {exe: 0o755, plain: 0o644}
    data = {p: p.read_bytes() for p in modes}
    chmod_file(exe, 0o644)
    chmod_file(plain, 0o775)
    edit_file(exe, data[exe] + b"# edited\n")
    env.pk("snapshot", "--name", "edited")
    env.pk("rollback", "--to", "base")
    assert {p: stat.S_IMODE(p.stat().st_mode) for p in modes} == modes
    assert {p: p.read_bytes() for p in modes} == data
    env.pk("rollback", "--to", "edited")
    assert stat.S_IMODE(exe.stat().st_mode) == 0o644 and stat.S_IMODE(plain.stat().st_mode) == 0o775

    # a hostile state dir: base's row of the executable file rewritten, through `rollback --to base`
    ledger = {p.name: p.read_bytes() for p in sorted((env.state_dir / "ledger").glob("*.json"))}
    key = str(exe.relative_to(env.site)).encode()

    def venv() -> dict[str, tuple]:
        return {k: v for k, v in every_path(env.venv).items() if not k.startswith(str(env.state_dir))}

    whole, untouched = venv(), stat_identities(env.venv, env.state_dir)  # a write moves an identity
    corpus = [(m, None) for m in HOSTILE_MODES[:12] + ["-644", "0o644", "7" * 5000]]
    corpus += [(None, s) for s in ["-1", "+1", "1_000", str(2**63), "9" * 5000]]
    for mode, size in corpus:
        plant_manifests(env.state_dir, ledger, _row_rewritten(key, mode, size))
        before = every_path(outside, env.state_dir / "ledger")
        proc = env.pk("rollback", "--to", "base", check=None)
        lines = proc.stderr.splitlines()
        assert proc.returncode == 2, (mode, size, proc.stdout, proc.stderr)
        assert len(lines) == 2 and lines[0].startswith("patchkeeper: error: "), (mode, size, proc.stderr)
        assert "is damaged" in lines[0] and ("mode" if mode is not None else "size") in lines[0]
        assert lines[1].startswith("  hint: the state dir's record is damaged"), proc.stderr
        assert len(proc.stderr) < 1000  # the line names the value, cut short
        assert stat_identities(env.venv, env.state_dir) == untouched, (mode, size)
        assert every_path(outside, env.state_dir / "ledger") == before, (mode, size)
        assert not (env.state_dir / "journal.json").exists()
        put_back_ledger(env.state_dir, ledger)
    assert venv() == whole and (outside / "canary").read_bytes() == b"CANARY\n"
    env.pk("rollback", "--to", "base")  # the record put back rolls back again
    assert {p: stat.S_IMODE(p.stat().st_mode) for p in modes} == modes


def test_a_file_with_a_setuid_setgid_or_sticky_bit_is_not_recorded(env):
    """The writer refuses what the reader would: such a file in site-packages is not recorded into a
    state no rollback could read back, by snapshot nor by apply."""
    target = env.site / "sglang" / "README.md"
    for bits in (0o4755, 0o2755, 0o1644):
        chmod_file(target, bits)
        assert stat.S_IMODE(target.stat().st_mode) == bits
        proc = env.pk("snapshot", "--name", "base", "--accept-edits", check=2)
        lines = proc.stderr.splitlines()
        assert len(lines) == 2 and "cannot record the file 'sglang/README.md'" in lines[0], proc.stderr
        assert f"mode {bits:o} is not a recorded file's" in lines[0] and "chmod u-s,g-s,-t" in lines[1]
        assert not list((env.state_dir / "ledger").glob("*.json"))
    chmod_file(target, 0o644)
    env.pk("snapshot", "--name", "base")
    os.chmod(target, 0o4644)  # an inode of our own since chmod_file
    readme = target.read_text().splitlines(keepends=True)
    d = env.root / "patchsets" / "ok"
    d.mkdir()
    (d / "patchset.toml").write_text('name = "ok"\nversion = "1.0.0"\npackage = "sglang"\n')
    (d / "0001.patch").write_text(
        "diff --git a/sglang/README.md b/sglang/README.md\n--- a/sglang/README.md\n+++ b/sglang/README.md\n"
        f"@@ -1,2 +1,3 @@\n {readme[0]}+patched\n {readme[1]}"
    )
    proc = env.pk("apply", "ok", "--force", check=2)
    assert "cannot record the file 'sglang/README.md'" in proc.stderr and len(proc.stderr.splitlines()) == 2
    assert target.read_text() == "".join(readme) and stat.S_IMODE(target.stat().st_mode) == 0o4644


def test_a_hostile_mode_or_size_in_a_hosts_manifest_is_refused_over_ssh_changing_nothing(remote, tmp_path):
    """The same refusal end to end over the suite's sshd: the host's stored manifest, read there by its
    agent, rows sent to the controller (targets/shapes.py checks them); `rollback` stops with one line and
    a hint before anything on the host changes, and rolls back once the record is put back."""
    exe = next(p for p in sorted((remote.site / "sglang").rglob("*.py")) if p.stat().st_mode & 0o111)
    original = exe.read_bytes()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "canary").write_bytes(b"CANARY\n")
    remote.pk("snapshot", "--name", "base")
    edit_file(exe, original + b"# edited\n")
    remote.pk("snapshot", "--name", "edited")
    ledger = {p.name: p.read_bytes() for p in sorted((remote.state_dir / "ledger").glob("*.json"))}
    key = str(exe.relative_to(remote.site)).encode()
    untouched = stat_identities(remote.venv, remote.state_dir)
    for mode, size in [("4755", None), ("2755", None), ("1755", None), ("100644", None), ("-644", None),
                       (None, "-1"), (None, str(2**63))]:  # fmt: skip
        plant_manifests(remote.state_dir, ledger, _row_rewritten(key, mode, size))
        proc = remote.pk("rollback", "--to", "base", check=None)
        lines = proc.stderr.splitlines()
        assert proc.returncode == 2, (mode, size, proc.stdout, proc.stderr)
        assert len(lines) == 2 and lines[0].startswith("patchkeeper: error: "), (mode, size, proc.stderr)
        assert "is damaged" in lines[0] and ("mode" if mode is not None else "size") in lines[0], proc.stderr
        assert lines[1].startswith("  hint: "), proc.stderr
        assert stat_identities(remote.venv, remote.state_dir) == untouched, (mode, size)
        assert not (remote.state_dir / "journal.json").exists()
        put_back_ledger(remote.state_dir, ledger)
    assert (outside / "canary").read_bytes() == b"CANARY\n" and exe.read_bytes() == original + b"# edited\n"
    remote.pk("rollback", "--to", "base")  # the record put back rolls back over SSH again
    assert exe.read_bytes() == original and stat.S_IMODE(exe.stat().st_mode) == 0o755
