"""The diff reader against `git apply` itself: a diff damaged between and inside its hunks is refused
where git refuses it and read as git reads it elsewhere, never applied in part, never a traceback."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest
from conftest import tree

from patchkeeper.errors import PatchkeeperError
from patchkeeper.patchset import gitdiff, patching

SPEC = "sglang/srt/speculative/spec_info.py"
BASE = "".join(f"line {n}\n" for n in range(1, 61)).encode()


def _git(repo: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, **kw)


def _three_hunk_diff(tmp_path: Path) -> tuple[Path, str]:
    """A repo holding f (60 lines) and the diff `git diff` writes for three changes far apart."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", check=True)
    (repo / "f").write_bytes(BASE)
    _git(repo, "add", "f", check=True)
    (repo / "f").write_bytes(
        BASE.replace(b"line 5\n", b"five\n").replace(b"line 30\n", b"thirty\n").replace(b"line 55\n", b"")
    )
    diff = _git(repo, "diff", check=True, text=True).stdout
    (repo / "f").write_bytes(BASE)
    assert diff.count("\n@@ -") == 3
    return repo, diff


def _mutations(diff: str) -> dict[str, str]:
    """Damaged and odd forms of a three-hunk diff: between hunks, inside them, right after headers."""
    lines = diff.split("\n")
    heads = [i for i, line in enumerate(lines) if line.startswith("@@ -")]
    out: dict[str, str] = {"as written": diff}

    def put(name: str, at: int, *new: str, drop: int = 0) -> None:
        out[name] = "\n".join(lines[:at] + list(new) + lines[at + drop :])

    for k, at in enumerate(heads):
        for what, text in (
            ("a note", "this is a note"),
            ("an empty line", ""),
            ("a dash line", "-- "),
            ("a quoted reply", "> quoted"),
            ("a no-newline mark", "\\ No newline at end of file"),
        ):
            put(f"{what} before hunk {k + 1}", at, text)
        put(f"no-newline mark right after header {k + 1}", at + 1, "\\ No newline at end of file")
        put(f"short backslash line in hunk {k + 1}", at + 2, "\\ x")
        put(f"backslash without space in hunk {k + 1}", at + 2, "\\No newline at end of file")
        put(f"a context line dropped in hunk {k + 1}", at + 1, drop=1)
        put(f"a context line added in hunk {k + 1}", at + 1, " extra")
        put(f"a broken header {k + 1}", at, lines[at].replace(" @@", " @", 1), drop=1)
        body = range(at + 1, heads[k + 1] if k + 1 < len(heads) else len(lines) - 1)
        changed = [lines[i] for i in body]
        ctx = [(" " + line[1:] if line[:1] == "-" else line) for line in changed if line[:1] != "+"]
        header = lines[at].split(" @@")[0]
        old_count = len(ctx)
        put(
            f"hunk {k + 1} without changes",
            at,
            f"{header.split(' +')[0]},{old_count} +{header.split(' +')[0][4:].split(',')[0]},{old_count} @@",
            *ctx,
            drop=len(changed) + 1,
        )
    out["a note after the last hunk"] = diff + "a note\n"
    out["a stray header after the last hunk"] = diff + "a note\n@@ -1 +1 @@\n"
    out["a stray header before the diff"] = "@@ -1 +1 @@\n" + diff
    return out


def _git_says(repo: Path, diff: str, tmp_path: Path) -> bytes | None:
    """The bytes of f after `git apply` of the diff, None when git refuses it."""
    patch = tmp_path / "m.patch"
    patch.write_text(diff)
    if _git(repo, "apply", "--check", str(patch)).returncode != 0:
        return None
    work = tmp_path / "work"
    subprocess.run(["rm", "-rf", str(work)], check=True)
    subprocess.run(["cp", "-a", str(repo), str(work)], check=True)
    _git(work, "apply", str(patch), check=True)
    return (work / "f").read_bytes()


def _we_say(diff: str) -> bytes | None:
    """The bytes of f after patchkeeper reads and applies the diff, None when it refuses it."""
    try:
        parsed = gitdiff.parse(diff, "m.patch")
        data: bytes | None = BASE
        for fp in parsed:
            data = patching.apply(fp, data, "m.patch").data
            if data is None:
                return None
        return data
    except PatchkeeperError:
        return None


def test_damaged_diffs_are_read_and_refused_as_git_apply_does(tmp_path):
    repo, diff = _three_hunk_diff(tmp_path)
    cases = _mutations(diff)
    assert len(cases) >= 40
    verdicts = {name: (_git_says(repo, text, tmp_path), _we_say(text)) for name, text in cases.items()}
    differ = {name: (g is not None, w is not None) for name, (g, w) in verdicts.items() if g != w}
    assert differ == {}, differ
    refused = [name for name, (g, _) in verdicts.items() if g is None]
    assert 20 < len(refused) < len(cases) - 5  # the corpus holds both verdicts


def test_random_lines_between_hunks_never_apply_in_part(tmp_path):
    """Any line that is not a hunk's between two hunks of one file: the whole diff refused, as git does."""
    repo, diff = _three_hunk_diff(tmp_path)
    rng = random.Random(38)
    lines = diff.split("\n")
    heads = [i for i, line in enumerate(lines) if line.startswith("@@ -")][1:]
    alphabet = "abc -+\\@ >#"
    for _ in range(30):
        at = rng.choice(heads)
        junk = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 14)))
        if junk[:1] in (" ", "-", "+") or junk.startswith("@@ -"):
            junk = "x" + junk  # a hunk line would lengthen the hunk before: another case
        text = "\n".join(lines[:at] + [junk] + lines[at:])
        assert _git_says(repo, text, tmp_path) is None, junk
        assert _we_say(text) is None, junk


def _site_diff(env, tmp_path: Path) -> str:
    """A two-hunk git diff of a real package file, made by git in a repo holding it."""
    repo = tmp_path / "site-repo"
    (repo / SPEC).parent.mkdir(parents=True)
    original = (env.site / SPEC).read_bytes()
    (repo / SPEC).write_bytes(original)
    _git(repo, "init", "-q", check=True)
    _git(repo, "add", "-A", check=True)
    lines = original.split(b"\n")
    lines[3] = lines[3] + b"  # first change"
    lines[-10] = lines[-10] + b"  # second change"
    (repo / SPEC).write_bytes(b"\n".join(lines))
    diff = _git(repo, "diff", check=True, text=True).stdout
    assert diff.count("\n@@ -") == 2
    return diff


@pytest.mark.parametrize("between", ["a note from the author", ""])
def test_import_and_apply_refuse_a_diff_with_a_line_between_hunks(env, tmp_path, between):
    """The issue's silent partial apply: the reader skipped the rest as mail text, import and apply
    exited 0 with only the first hunk applied."""
    diff = _site_diff(env, tmp_path)
    at = diff.index("\n@@ -", diff.index("\n@@ -") + 1) + 1
    damaged = diff[:at] + between + "\n" + diff[at:]
    (tmp_path / "d.patch").write_text(damaged)
    assert _git(env.site, "apply", "--check", str(tmp_path / "d.patch")).returncode == 128  # git refuses it
    before = tree(env.root)
    proc = env.pk("import", "partial", str(tmp_path / "d.patch"), check=2)
    assert "patch fragment without header" in proc.stderr and proc.stderr.count("error:") == 1
    assert tree(env.root) == before
    d = env.root / "patchsets" / "partial"  # and one put there by hand is refused by apply
    d.mkdir()
    (d / "patchset.toml").write_text('name = "partial"\nversion = "1.0.0"\npackage = "sglang"\n')
    (d / "partial.patch").write_text(damaged)
    site = env.snapshot()
    proc = env.pk("apply", "partial", "--no-verify", check=2)
    assert "patch fragment without header" in proc.stderr and "Traceback" not in proc.stderr
    assert env.snapshot() == site


def test_a_no_newline_mark_right_after_a_hunk_header_is_ignored_as_git_does(baselined, tmp_path):
    env = baselined
    diff = _site_diff(env, tmp_path)
    at = diff.index("\n", diff.index("\n@@ -") + 1) + 1
    odd = diff[:at] + "\\ No newline at end of file\n" + diff[at:]
    (tmp_path / "odd.patch").write_text(odd)
    work = tmp_path / "git-work"
    (work / SPEC).parent.mkdir(parents=True)
    (work / SPEC).write_bytes((env.site / SPEC).read_bytes())
    _git(work, "init", "-q", check=True)
    _git(work, "apply", str(tmp_path / "odd.patch"), check=True)
    env.pk("import", "odd", str(tmp_path / "odd.patch"))
    env.pk("apply", "odd", "--no-verify")
    assert (env.site / SPEC).read_bytes() == (work / SPEC).read_bytes()
