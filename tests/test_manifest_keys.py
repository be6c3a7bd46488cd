"""A state dir's stored manifests are data: a key that is not a file key (host/filekeys.py) is refused
where the manifest is parsed, on this machine and over SSH, before any plan or write. A hostile
state dir whose manifest lists `../../outside/canary` or an absolute path once made `rollback` write
there; now rollback, status, audit and diff refuse it (exit 2, one line and a hint) and change nothing."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from conftest import Env, copy_venv, every_path, make_workspace
from helpers import hostile_paths, plant_manifests, put_back_ledger, stat_identities

from patchkeeper.host import filekeys, manifest_text
from patchkeeper.host.errors import AgentError
from patchkeeper.host.manifests import DAMAGED, Manifests
from patchkeeper.host.store import Store
from patchkeeper.printable import CONTROL
from patchkeeper.targets import shapes

ROW = ("blake3:" + "ab" * 32, 12, 0o644)
GOOD = ["sglang/__init__.py", "sglang/srt/.clang-format", "sglang/a@b/c.py", "sglang-0.5.23.dist-info/RECORD",
        "@unit", "@dropin", "x", "a/b/" + "c" * 255, "sglang/..x", "sglang/.gitignore", "sglang/x.git"]  # fmt: skip


def _manifest_keys() -> list[str]:
    """A real manifest's keys: every file of the pristine sglang package, and the roles."""
    site = Path(os.environ.get("PK_SGLANG_VENV", ".cache/sglang-venv")) / "lib/python3.11/site-packages"
    keys = [str(p.relative_to(site)) for p in (site / "sglang").rglob("*") if p.is_file()]
    return sorted(keys + ["@unit", "@dropin"]) or GOOD


@pytest.fixture(scope="module")
def real_keys() -> list[str]:
    return _manifest_keys()


# ---- the grammar, screened in one pass, agrees with it key by key ---------------------------------
def test_good_keys_pass_and_the_screen_agrees_with_the_grammar(real_keys):
    assert filekeys.keys_problem(real_keys) is None
    assert filekeys.keys_problem(GOOD) is None
    for key in GOOD:
        assert filekeys.key_problem(key) is None, key


@pytest.mark.parametrize(
    "key", hostile_paths() + ["@" + h for h in hostile_paths()] + ["@", "@.x", "@a\nb", "%x", "%../x"]
)
def test_every_hostile_key_is_refused_wherever_it_stands_among_real_ones(real_keys, key):
    assert filekeys.key_problem(key) is not None
    rng = random.Random(repr(key))
    for at in (0, 1, rng.randrange(len(real_keys)), len(real_keys)):
        assert filekeys.keys_problem([*real_keys[:at], key, *real_keys[at:]]) is not None, (key, at)


def test_a_role_holds_no_character_a_patch_set_could_not_name_it_with():
    """The reader's role rule is the writer's: every code point printable.CONTROL holds (what names.py
    refuses in a role a patch set names) is refused in a manifest's role key, and no other is for it."""
    for code in range(0x3000):
        char = chr(code)
        if char in "/\\" or 0xD800 <= code < 0xE000:
            continue
        refused = filekeys.key_problem(f"@unit{char}x") is not None
        assert refused == bool(CONTROL.search(char)), hex(code)


def test_a_generated_corpus_screens_as_the_grammar_judges_each_key():
    """Keys made of real parts and hostile fragments: the one-pass screen finds a problem exactly when
    some key has one, key by key."""
    rng = random.Random(31)
    parts = ["sglang", "srt", "a.py", ".x", "..", ".", "", ".git", ".GiT", "a\\b", "n\0l", "\udcff", "é", "@r", "%e",
             "x" * 255, "x" * 256, "é" * 128, "/"]  # fmt: skip
    for _ in range(3000):
        keys = [
            "/".join(rng.choice(parts) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(1, 5))
        ]
        expected = any(filekeys.key_problem(k) for k in keys)
        assert (filekeys.keys_problem(keys) is not None) == expected, keys


# ---- parsing a stored manifest -----------------------------------------------------------------------
@pytest.mark.parametrize("key", hostile_paths())
def test_parse_refuses_a_manifest_with_a_hostile_key(key):
    rows = {"sglang/__init__.py": ROW, key: ROW}
    with pytest.raises(ValueError, match="file key"):
        manifest_text.parse(manifest_text.write_rows(dict(sorted(rows.items()))))


@pytest.mark.parametrize(
    "text", [b"644 12\n", b"x 12 d k\n", b"644 z d k\n", b'644 1 d "unterminated\n', b"644 1 d \n", b"\n644"]
)
def test_parse_refuses_a_line_that_is_not_a_manifest_row(text):
    with pytest.raises(ValueError, match="line|file key"):
        manifest_text.parse(text)


def test_the_agent_refuses_a_stored_manifest_naming_it(tmp_path):
    store = Store(str(tmp_path / "store"))
    digest = store.put(manifest_text.write_rows({"../../outside/canary": ROW, "sglang/x.py": ROW}))
    with pytest.raises(AgentError) as caught:
        Manifests(lambda root: store).rows(str(tmp_path / "store"), digest)
    assert caught.value.kind == DAMAGED
    assert digest in caught.value.message and "'../../outside/canary'" in caught.value.message
    assert "state dir's record is damaged" in caught.value.hint


@pytest.mark.parametrize("key", hostile_paths() + ["%../x"])
def test_the_controller_refuses_manifest_rows_a_host_sends_with_a_hostile_key(key):
    with pytest.raises(shapes.Malformed):
        shapes.answer("manifest_rows", {"sglang/x.py": ROW, key: ROW})
    shapes.answer("manifest_rows", {"sglang/x.py": ROW, "@unit": ROW})


# ---- a hostile state dir, end to end ------------------------------------------------------------------
def _plant(state_dir: Path, key: str, ledger: dict[str, bytes]) -> None:
    """Every ledger entry as it was (`ledger`), but each state's manifest with a row `key` more (the bytes
    of sglang/README.md, which the store holds)."""

    def rewrite(text: bytes) -> bytes:
        rows = manifest_text.parse(text)
        rows[key] = rows["sglang/README.md"]
        return manifest_text.write_rows(dict(sorted(rows.items())))

    plant_manifests(state_dir, ledger, rewrite)


def _readme_patchset(env: Env) -> None:
    readme = (env.site / "sglang/README.md").read_text().splitlines(keepends=True)
    patch = "".join(
        ["diff --git a/sglang/README.md b/sglang/README.md\n", "--- a/sglang/README.md\n",
         "+++ b/sglang/README.md\n", "@@ -1,2 +1,3 @@\n", " " + readme[0], "+patched\n", " " + readme[1]]
    )  # fmt: skip
    d = env.root / "patchsets" / "ok"
    d.mkdir()
    (d / "patchset.toml").write_text('name = "ok"\nversion = "1.0.0"\npackage = "sglang"\n')
    (d / "0001.patch").write_text(patch)


def _hostile_keys(env: Env, outside: Path) -> list[str]:
    """The corpus, its absolute paths moved below `outside` (the test must not reach /etc even when the
    check is gone), and the two keys of the report: a climb to the canary, and its absolute path."""
    canary = outside / "canary"
    keys = [f"{outside}{k}" if k.startswith("/") else k for k in hostile_paths()]
    return [os.path.relpath(canary, env.site), str(canary), *keys]


@pytest.mark.parametrize("command", [("rollback", "--to", "base"), ("status",), ("audit",), ("diff",)])
def test_a_hostile_manifest_key_is_refused_and_nothing_changes(tmp_path, pristine_venv, command):
    env = make_workspace(tmp_path / "ws", copy_venv(pristine_venv, tmp_path / "venv"))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "canary").write_bytes(b"CANARY-SECRET\n")
    env.pk("snapshot", "--name", "base")
    _readme_patchset(env)
    env.pk("apply", "ok")
    ledger = {p.name: p.read_bytes() for p in sorted((env.state_dir / "ledger").glob("*.json"))}

    def venv() -> dict[str, tuple]:
        return {k: v for k, v in every_path(env.venv).items() if not k.startswith(str(env.state_dir))}

    def identities() -> tuple:  # per key: any write moves an entry's mtime, ctime or inode
        return (
            stat_identities(env.venv, env.state_dir),
            every_path(outside),
            every_path(env.state_dir / "ledger"),
        )

    keys = _hostile_keys(env, outside)  # one of each kind: the whole corpus is parse's, tested above
    keys = keys[:6] + [next(k for k in keys if mark in k) for mark in ("\\", ".git", "\0", "\udcff")]
    if command[0] != "rollback":  # the readers go through the same parse: the report's two keys and one more
        keys = keys[:2] + keys[-4:-3]
    whole = venv()
    for key in keys:
        _plant(env.state_dir, key, ledger)
        before = identities()
        proc = env.pk(*command, check=None)
        lines = proc.stderr.splitlines()
        assert proc.returncode == 2, (key, proc.stdout, proc.stderr)
        assert len(lines) == 2 and lines[0].startswith("patchkeeper: error: "), (key, proc.stderr)
        assert "is damaged" in lines[0] and lines[1].startswith("  hint: the state dir's record is damaged")
        assert identities() == before, key
        assert not (env.state_dir / "journal.json").exists()
        assert (outside / "canary").read_bytes() == b"CANARY-SECRET\n"
        put_back_ledger(env.state_dir, ledger)
    assert venv() == whole  # every byte and mode as it was
    assert env.pk(*command, check=None).returncode in (0, 1)  # the record put back reads again


def test_a_file_name_no_state_could_be_read_back_with_is_not_recorded(env):
    """The writer refuses what the reader would: a file in site-packages named with a backslash (a
    valid POSIX name, but not a file key) is not recorded into a state that could never be read."""
    (env.site / "sglang" / "odd\\name.py").write_bytes(b"x = 1\n")
    proc = env.pk("snapshot", "--name", "base", "--accept-edits", check=2)
    assert "cannot record the file" in proc.stderr and "odd" in proc.stderr
    assert not list((env.state_dir / "ledger").glob("*.json"))


def test_a_hostile_manifest_key_is_refused_over_ssh(fleet, tmp_path):
    """The agent on the host refuses it as it parses the manifest; the controller says what to do."""
    fleet.pk("snapshot", "--name", "base", "-t", "ct129")
    state_dir = fleet.venvs["ct129"] / ".patchkeeper"
    ledger = {p.name: p.read_bytes() for p in sorted((state_dir / "ledger").glob("*.json"))}
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "canary").write_bytes(b"CANARY\n")
    _plant(state_dir, str(outside / "canary"), ledger)
    before = fleet.state("ct129")
    for command in (
        ("status", "-t", "ct129"),
        ("rollback", "-t", "ct129", "--to", "base"),
        ("diff", "ct129"),
    ):
        proc = fleet.pk(*command, check=2)
        lines = proc.stderr.splitlines()
        assert len(lines) == 2 and "is damaged: file key '/" in lines[0], proc.stderr
        assert "is not relative, or leaves its directory" in lines[0]
        assert (
            "hint: the state dir's record is damaged" in proc.stderr
            and "snapshots/ct129/ledger/" in proc.stderr
        )
    assert fleet.state("ct129") == before and (outside / "canary").read_bytes() == b"CANARY\n"
