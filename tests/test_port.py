"""`patchkeeper port`: patch sets made for the real sglang 0.5.22 from its real differences with 0.5.23,
carried to 0.5.23 and applied on a real 0.5.23 target, byte for byte."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import REPO, copy_venv, make_workspace, tree
from made_wheels import make_wheel

from patchkeeper.checks import wheels
from patchkeeper.errors import BadInput
from patchkeeper.patchset import diffwrite
from patchkeeper.patchset.patching import split_lines

PORT_WHEELS = Path(os.environ.get("PK_WHEELS", REPO / ".cache" / "wheels")) / "port"
OLD, NEW = "0.5.22", "0.5.23"
ADDED = "sglang/srt/pk_port_test_added.py"


def wheel(version: str) -> Path:
    found = sorted(PORT_WHEELS.glob(f"sglang-{version}-*.whl"))
    if not found:
        pytest.fail(
            f"no sglang {version} wheel in {PORT_WHEELS}: run the tests with `make test`, which fetches it"
        )
    return found[0]


class Releases:
    """Both releases, read from their wheels once per session: only the files a test asks for."""

    def __init__(self) -> None:
        self.zips = {v: zipfile.ZipFile(wheel(v)) for v in (OLD, NEW)}
        self.infos = {v: {i.filename: i for i in z.infolist()} for v, z in self.zips.items()}
        self._lines: dict[tuple[str, str], list[str]] = {}
        old, new = self.infos[OLD], self.infos[NEW]
        py = [n for n in old if n.startswith("sglang/") and n.endswith(".py")]
        self.changed = sorted(
            n for n in py if n in new and new[n].CRC != old[n].CRC and n.startswith("sglang/srt/")
        )
        self.removed = sorted(n for n in py if n not in new)
        self.added = sorted(n for n in new if n not in old and n.startswith("sglang/") and n.endswith(".py"))

    def lines(self, version: str, path: str) -> list[str]:
        if (version, path) not in self._lines:
            self._lines[version, path] = split_lines(self.zips[version].read(path).decode())
        return self._lines[version, path]

    def data(self, version: str, path: str) -> bytes:
        return self.zips[version].read(path)


@pytest.fixture(scope="session")
def releases() -> Releases:
    return Releases()


@dataclass(frozen=True)
class Edit:
    """A change to one file: the run of lines `old` (found once) becomes `new`."""

    path: str
    old: tuple[str, ...]
    new: tuple[str, ...]

    def on(self, data: bytes) -> bytes:
        lines = split_lines(data.decode())
        at = [i for i in range(len(lines)) if tuple(lines[i : i + len(self.old)]) == self.old]
        assert len(at) == 1, (self.path, self.old, at)
        return "".join(lines[: at[0]] + list(self.new) + lines[at[0] + len(self.old) :]).encode()


def _once(line: str, *files: list[str]) -> bool:
    return (
        bool(line.strip())
        and line.endswith("\n")
        and not line.rstrip().endswith("\\")
        and all(f.count(line) == 1 for f in files)
    )


def _ops(r: Releases, path: str) -> list[tuple[str, int, int, int, int]]:
    return diffwrite.opcodes(r.lines(OLD, path), r.lines(NEW, path))


def find(r: Releases, what: str, taken: set[str]) -> Edit:
    """An edit of a file both releases have, of the kind `what` names, in a file not taken yet."""
    for path in r.changed:
        if path in taken:
            continue
        a, b = r.lines(OLD, path), r.lines(NEW, path)
        ops = _ops(r, path)
        for k, (tag, i1, i2, j1, j2) in enumerate(ops):
            prev = ops[k - 1] if k else None
            after = ops[k + 1] if k + 1 < len(ops) else None
            if what == "clean" and tag == "equal" and i2 - i1 >= 21 and j1 != i1 and _once(a[i1 + 10], a, b):
                edit = Edit(path, (a[i1 + 10],), (a[i1 + 10], "# pk-port-test: clean\n"))
            elif (
                tag != "replace"
                or i2 - i1 != j2 - j1
                or not prev
                or prev[0] != "equal"
                or not after
                or after[0] != "equal"
                or after[2] - after[1] < 4
            ):
                continue
            elif what == "merged" and i2 - i1 == 1 and prev[2] - prev[1] >= 8 and _once(a[i1 - 3], a, b):
                edit = Edit(path, (a[i1 - 3],), (a[i1 - 3], "# pk-port-test: merged\n"))
            elif (
                what == "upstream"
                and i2 - i1 <= 3
                and prev[2] - prev[1] >= 4
                and all(_once(x, a) for x in a[i1:i2])
            ):
                edit = Edit(path, tuple(a[i1:i2]), tuple(b[j1:j2]))
            elif (
                what == "conflict"
                and i2 - i1 == 1
                and prev[2] - prev[1] >= 4
                and _once(a[i1], a)
                and _once(b[j1], b)
                and not a[i1].lstrip().startswith("#")
            ):
                edit = Edit(path, (a[i1],), (a[i1].rstrip("\n") + "  # pk-port-test: conflict\n",))
                if not _compiles(Edit(path, (b[j1],), edit.new).on(r.data(NEW, path))):
                    continue  # resolved as ours, it must still be Python
            else:
                continue
            taken.add(path)
            return edit
    raise AssertionError(f"no {what} edit found between sglang {OLD} and {NEW}")


def _compiles(data: bytes) -> bool:
    try:
        ast.parse(data)
        return True
    except SyntaxError:
        return False


def find_removed(r: Releases, renamed: bool) -> tuple[Edit, str | None]:
    """An edit of a file 0.5.23 removed: one it moved (same name, alike), or one it dropped."""
    by_name: dict[str, list[str]] = {}
    for path in r.added:
        by_name.setdefault(path.rpartition("/")[2], []).append(path)
    for path in r.removed:
        a = r.lines(OLD, path)
        name = path.rpartition("/")[2]
        twins = [p for p in by_name.get(name, []) if r.lines(NEW, p) == a] if name != "__init__.py" else []
        near = [p for p in r.added if p.rpartition("/")[0] == path.rpartition("/")[0]]
        if renamed != bool(twins) or (not renamed and (by_name.get(name) or near)) or len(a) < 20:
            continue
        anchor = next((line for line in a[len(a) // 2 :] if _once(line, a)), None)
        if anchor is not None:
            return Edit(path, (anchor,), (anchor, "# pk-port-test: gone\n")), twins[0] if twins else None
    raise AssertionError("no removed file found")


def patch_of(r: Releases, *edits: Edit) -> bytes:
    changes = []
    for e in edits:
        base = r.data(OLD, e.path) if e.path in r.infos[OLD] else None
        changes.append(
            diffwrite.Change(
                e.path,
                base,
                e.on(base) if base is not None else e.new[0].encode(),
                0o644 if base is not None else None,
                0o644,
            )
        )
    return diffwrite.diff(changes)


UNIT = (REPO / "patchsets" / "dflash" / "dropin.conf").read_bytes()  # a role file: the drop-in


def write_set(
    root: Path, name: str, patches: dict[str, bytes], package: str = "sglang", pin: str = f"=={OLD}"
) -> Path:
    d = root / "patchsets" / name
    d.mkdir(parents=True)
    (d / "patchset.toml").write_text(
        f'name = "{name}"\nversion = "1.0.0"\ndescription = "port test"\npackage = "{package}"\n'
        f'package_version = "{pin}"   # the release it was made for\nrequires = []\n\n'
        '[files]\ndropin = "dropin.conf"\n\n# the unit\'s defaults\n[vars]\ntp_size = 2\n'
        'python = "/usr/bin/python3"\nmodel_path = "/m"\nhost = "0.0.0.0"\nport = 30000\n'
    )
    (d / "dropin.conf").write_bytes(UNIT)
    for fname, data in patches.items():
        (d / fname).write_bytes(data)
    return d


def pk(root: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    import sys

    return subprocess.run(
        [sys.executable, "-m", "patchkeeper", "--workspace", str(root), *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )


def both_wheels() -> list[str]:
    return ["--wheel", str(wheel(OLD)), "--wheel", str(wheel(NEW))]


def outcomes(doc: dict) -> dict[str, list[str]]:
    return {f["path"]: [h["outcome"] for h in f["hunks"]] for f in doc["files"]}


@pytest.fixture(scope="module")
def edits(releases) -> dict[str, Edit]:
    taken: set[str] = set()
    out = {what: find(releases, what, taken) for what in ("clean", "merged", "upstream", "conflict")}
    out["gone"], _ = find_removed(releases, renamed=False)
    out["renamed"], twin = find_removed(releases, renamed=True)
    assert twin is not None
    out["twin"] = Edit(twin, (), ())  # where 0.5.23 moved the renamed file
    out["added"] = Edit(ADDED, (), ('VALUE = "added by the port test"\n',))
    out["collision"] = Edit(releases.added[0], (), ("VALUE = 2\n",))
    return out


def git_init(root: Path) -> None:
    for args in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "ws"],
    ):
        subprocess.run(["git", *args], cwd=root, check=True)
    subprocess.run(["git", "config", "user.name", "t"], cwd=root, check=True)
    subprocess.run(["git", "config", "user.email", "t@t"], cwd=root, check=True)


def test_a_clean_port_is_written_as_the_next_version_and_applies_on_0_5_23_byte_for_byte(
    tmp_path, pristine_venv, releases, edits
):
    env = make_workspace(tmp_path / "ws", copy_venv(pristine_venv, tmp_path / "venv"))
    git_init(env.root)
    e = edits
    write_set(
        env.root,
        "portok",
        {
            "0001-clean.patch": patch_of(releases, e["clean"]),
            "0002-merged.patch": patch_of(releases, e["merged"]),
            "0003-upstream.patch": patch_of(releases, e["upstream"]),
            "0004-added.patch": patch_of(releases, e["added"]),
        },
    )
    proc = env.pk("port", "portok", "--to", NEW, *both_wheels(), "--json")
    doc = json.loads(proc.stdout)
    assert outcomes(doc) == {
        e["clean"].path: ["clean"],
        e["merged"].path: ["merged"],
        e["upstream"].path: ["upstream"],
        ADDED: ["clean"],
    }
    clean = doc["files"][0]["hunks"][0]
    assert clean["offset"] != 0 and "+# pk-port-test: clean" in clean["lines"]
    assert doc["outcome"] == "ported" and doc["dropped"] == ["0003-upstream.patch"] and not doc["problems"]
    assert doc["written"]["ident"] == "portok@1.1.0" and doc["written"]["previous"] == "1.0.0"
    d = env.root / "patchsets" / "portok"
    assert sorted(p.name for p in d.iterdir()) == [
        "0001-clean.patch",
        "0002-merged.patch",
        "0004-added.patch",
        "dropin.conf",
        "patchset.toml",
    ]
    toml = (d / "patchset.toml").read_text()
    assert (
        'version = "1.1.0"' in toml and f'package_version = "=={NEW}"   # the release it was made for' in toml
    )
    assert "# the unit's defaults" in toml and (d / "dropin.conf").read_bytes() == UNIT  # carried as is
    log = subprocess.run(
        ["git", "log", "--format=%s", "--", "patchsets/portok"],
        cwd=env.root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert log[0].startswith("patch set portok@1.1.0") and log[1].startswith(
        "patch set portok@1.0.0: as it was"
    )
    old_toml = subprocess.run(
        ["git", "show", "HEAD~1:patchsets/portok/patchset.toml"],
        cwd=env.root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f'package_version = "=={OLD}"' in old_toml

    env.pk("check", "portok", "--wheel", str(wheel(NEW)))
    before = env.snapshot()
    env.pk("apply", "portok")
    after = env.snapshot()
    site = env.site
    for what in ("clean", "merged"):
        path = e[what].path
        assert (site / path).read_bytes() == e[what].on(releases.data(NEW, path))  # 0.5.23 plus our change
    assert (site / ADDED).read_bytes() == e["added"].new[0].encode()
    assert (site / e["upstream"].path).read_bytes() == releases.data(NEW, e["upstream"].path)
    changed = {k for k in after if before.get(k) != after[k]} | {k for k in before if k not in after}
    rel = os.path.relpath(site, env.venv)
    assert changed == {f"{rel}/{p}" for p in (e["clean"].path, e["merged"].path, ADDED)} | {"@dropin"}


def test_a_blocked_port_writes_nothing_into_patchsets_and_continue_finishes_it(
    tmp_path, pristine_venv, releases, edits
):
    env = make_workspace(tmp_path / "ws", copy_venv(pristine_venv, tmp_path / "venv"))
    e = edits
    write_set(
        env.root,
        "portbad",
        {
            "0001-clean.patch": patch_of(releases, e["clean"]),
            "0002-conflict.patch": patch_of(releases, e["conflict"]),
            "0003-gone.patch": patch_of(releases, e["gone"]),
            "0004-renamed.patch": patch_of(releases, e["renamed"]),
            "0005-collision.patch": patch_of(releases, e["collision"]),
        },
    )
    before = tree(env.root)
    dry = env.pk("port", "portbad", "--to", NEW, *both_wheels(), "--dry-run", check=1)
    assert "dry run: nothing written" in dry.stdout and tree(env.root) == before

    doc = json.loads(env.pk("port", "portbad", "--to", NEW, *both_wheels(), "--json", check=1).stdout)
    twin = e["twin"].path
    assert outcomes(doc) == {
        e["clean"].path: ["clean"],
        e["conflict"].path: ["conflict"],
        e["gone"].path: ["gone"],
        e["renamed"].path: ["gone"],
        e["collision"].path: ["collision"],
    }
    files = {f["path"]: f for f in doc["files"]}
    assert files[e["renamed"].path]["renamed_to"] == twin and files[e["gone"].path]["renamed_to"] is None
    scratch = env.root / "port" / "portbad"
    assert doc["outcome"] == "blocked" and doc["scratch"] == str(scratch) and doc["written"] is None
    assert {
        k: v for k, v in tree(env.root).items() if not k.startswith("port/")
    } == before  # patchsets/ untouched

    conflicted = (scratch / "files" / e["conflict"].path).read_text()
    assert re.search(
        r"^<<<<<<< portbad@1\.0\.0 \(ours\)\n.*pk-port-test: conflict\n\|\|\|\|\|\|\| sglang 0\.5\.22 "
        r"\(base\)\n.*\n=======\n.*\n>>>>>>> sglang 0\.5\.23 \(theirs\)$",
        conflicted,
        re.M | re.S,
    )
    assert (scratch / "files" / twin).read_bytes() == e["renamed"].on(
        releases.data(NEW, twin)
    )  # merged where it went
    assert not (scratch / "files" / e["gone"].path).exists()
    text = env.pk("port", "portbad", "--to", NEW, *both_wheels(), check=1).stdout
    assert (
        f"the merge is in {scratch}/files/" in text
        and f"resolve files/{e['conflict'].path}  (1 conflict(s))" in text
    )
    assert "then: patchkeeper port portbad --continue" in text

    left = env.pk("port", "portbad", "--continue", check=1)
    assert (
        "conflict markers at line(s)" in left.stdout
        and (env.root / "patchsets" / "portbad" / "0003-gone.patch").exists()
    )
    resolved = re.sub(
        r"<<<<<<< .*? \(ours\)\n(.*?)\|\|\|\|\|\|\| .*?>>>>>>> [^\n]*\n", r"\1", conflicted, flags=re.S
    )
    (scratch / "files" / e["conflict"].path).write_text(resolved)  # ours kept
    (scratch / "files" / e["collision"].path).write_text("VALUE = 2\n")
    done = env.pk("port", "portbad", "--continue")
    assert "updated portbad@1.1.0 (was 1.0.0)" in done.stdout and not scratch.exists()

    env.pk("apply", "portbad")
    site = env.site
    assert (site / e["clean"].path).read_bytes() == e["clean"].on(releases.data(NEW, e["clean"].path))
    assert (site / e["conflict"].path).read_text() == resolved
    assert (site / twin).read_bytes() == e["renamed"].on(releases.data(NEW, twin))
    assert (site / e["collision"].path).read_text() == "VALUE = 2\n"
    assert not (site / e["gone"].path).exists()


@pytest.fixture
def ws(tmp_path, pristine_venv):
    """A workspace over the pristine 0.5.23 venv (nothing here applies), with patch sets to port."""
    return make_workspace(tmp_path / "ws", pristine_venv)


def test_port_fetches_the_releases_as_repair_does(ws, releases, edits):
    write_set(ws.root, "portok", {"0001-clean.patch": patch_of(releases, edits["clean"])})
    offline = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(PORT_WHEELS)}  # pip download, from the local copies
    doc = json.loads(ws.pk("port", "portok", "--to", NEW, "--json", "--dry-run", env=offline).stdout)
    assert doc["wheels"] == {
        "from": f"pip download: {wheel(OLD).name}",
        "to": f"pip download: {wheel(NEW).name}",
    }
    assert outcomes(doc) == {edits["clean"].path: ["clean"]} and doc["outcome"] == "dry-run"


@pytest.mark.parametrize(
    "case",
    [
        "unknown version",
        "not a version",
        "same version",
        "wheel of another package",
        "wheel of another release",
        "set for another package",
        "unpinned set",
        "set that does not fit its release",
        "no --to",
        "--continue with --to",
        "--continue with no port stopped",
        "set with a rename",
    ],
)
def test_bad_input_is_one_line_exit_2_and_nothing_written(ws, releases, edits, case):
    clean = patch_of(releases, edits["clean"])
    args = ["port", "portok", "--to", NEW, *both_wheels()]
    env = None
    if case == "set for another package":
        write_set(ws.root, "portok", {"0001.patch": clean}, package="six")
    elif case == "unpinned set":
        write_set(ws.root, "portok", {"0001.patch": clean}, pin=">=0.5")
        args = ["port", "portok", "--to", NEW]
    elif (
        case == "set that does not fit its release"
    ):  # made for 0.5.23 (a line 0.5.22 lacks), pinned to 0.5.22
        path = edits["conflict"].path
        a, b = releases.lines(OLD, path), releases.lines(NEW, path)
        line = next(x for x in b if _once(x, b) and x not in a)
        made = Edit(path, (line,), (line, "# x\n")).on(releases.data(NEW, path))
        write_set(
            ws.root,
            "portok",
            {
                "0001.patch": diffwrite.diff(
                    [diffwrite.Change(path, releases.data(NEW, path), made, 0o644, 0o644)]
                )
            },
        )
    elif case == "set with a rename":  # git diff's rename, which port does not merge
        path = edits["clean"].path
        write_set(
            ws.root,
            "portok",
            {
                "0001.patch": (
                    f"diff --git a/{path} b/{path}.moved\nsimilarity index 100%\n"
                    f"rename from {path}\nrename to {path}.moved\n"
                ).encode()
            },
        )
    else:
        write_set(ws.root, "portok", {"0001.patch": clean})
    if case == "unknown version":
        args, env = (
            ["port", "portok", "--to", "9.9.9"],
            {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(PORT_WHEELS)},
        )
    elif case == "not a version":
        args[3] = "latest"
    elif case == "same version":
        args[3] = OLD
    elif case == "wheel of another package":
        args += ["--wheel", str(next((PORT_WHEELS.parent).glob("six-1.17.0-*.whl")))]
    elif case == "wheel of another release":
        args = ["port", "portok", "--to", "0.5.24", "--wheel", str(wheel(NEW))]
    elif case == "no --to":
        args = ["port", "portok"]
    elif case == "--continue with --to":
        args = ["port", "portok", "--continue", "--to", NEW]
    elif case == "--continue with no port stopped":
        args = ["port", "portok", "--continue"]
    before = tree(ws.root)
    proc = ws.pk(*args, check=2, env=env)
    lines = proc.stderr.strip().splitlines()
    assert (
        lines[0].startswith("patchkeeper: error: ") and lines[1].startswith("  hint: ") and len(lines) == 2
    ), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert tree(ws.root) == before  # nothing written, not even a scratch directory
    expected = {
        "unknown version": "no wheel of sglang 9.9.9",
        "not a version": "is not a version",
        "same version": "is already for sglang 0.5.22",
        "wheel of another package": "a wheel of six",
        "wheel of another release": "neither 0.5.22",
        "set for another package": "not of six",
        "unpinned set": "port needs to know the one release",
        "set that does not fit its release": "does not fit its own release 0.5.22",
        "no --to": "give the release to port to",
        "--continue with --to": "--continue takes the release",
        "--continue with no port stopped": "no port of portok is waiting to be finished",
        "set with a rename": "which port does not merge yet",
    }[case]
    assert expected in lines[0]


def test_the_shipped_ddtree_ported_back_to_0_5_22_reports_every_hunk_and_the_new_dflash_places(ws):
    doc = json.loads(
        ws.pk("port", "ddtree", "--to", OLD, *both_wheels(), "--json", "--dry-run", check=1).stdout
    )
    hunks = [h for f in doc["files"] for h in f["hunks"]]
    assert len(hunks) == 24 and doc["hunks"]["clean"] >= 10 and doc["hunks"]["conflict"] >= 1
    assert outcomes(doc)["sglang/srt/speculative/ddtree_utils.py"] == ["clean"]  # a new file: 0.5.22 has none
    # 0.5.22 lacks the code around these; what it has instead names DFLASH alone in kv_cache_hook.py
    assert doc["scan"]["algorithm"] == "DDTREE" and 0 < doc["scan"]["parsed"] <= doc["scan"]["files"]
    assert any(p.startswith("sglang/srt/arg_groups/kv_cache_hook.py:") for p in doc["scan"]["new"])
    assert not (ws.root / "port").exists()
    for name in ("dflash", "nextn"):  # the drop-in alone: nothing to merge, carried as it is
        doc = json.loads(ws.pk("port", name, "--to", OLD, *both_wheels(), "--json", "--dry-run").stdout)
        assert doc["files"] == [] and doc["roles"] == ["dropin"] and doc["scan"] is None


@pytest.mark.parametrize("what", ["clean", "merged", "upstream", "conflict"])
def test_the_merge_of_each_real_file_is_what_git_merge_file_writes(what, releases, edits, tmp_path):
    from patchkeeper.patchset import gitdiff
    from patchkeeper.patchset.port import merge

    e = edits[what]
    base, theirs = releases.data(OLD, e.path), releases.data(NEW, e.path)
    fp = gitdiff.parse(patch_of(releases, e).decode(), "test")[0]
    labels = ("ours", "base", "theirs")
    data, conflicts, hunks = merge(base, fp, theirs, labels, "test")
    for name, side in zip(labels, (e.on(base), base, theirs)):
        (tmp_path / name).write_bytes(side)
    git = subprocess.run(
        ["git", "merge-file", "-p", "--diff3", *[a for n in labels for a in ("-L", n)], *labels],
        cwd=tmp_path,
        capture_output=True,
    )
    assert (data, conflicts) == (git.stdout, git.returncode) and [h.outcome for h in hunks] == [what]


def test_the_shipped_ddtree_merged_into_0_5_22_is_what_git_merge_file_writes_file_for_file(
    ws, releases, tmp_path
):
    """Every file of ddtree (made for 0.5.23) ported back to 0.5.22 is git merge-file's bytes for the
    same three files: base 0.5.23's, ours 0.5.23's with ddtree's patches put on by `git apply`,
    theirs 0.5.22's (a renamed file's: where 0.5.22 has it). Exit 1: it conflicts, and says where."""
    doc = json.loads(ws.pk("port", "ddtree", "--to", OLD, *both_wheels(), "--json", check=1).stdout)
    scratch = Path(doc["scratch"])
    ours = tmp_path / "ours"
    patches = sorted((REPO / "patchsets" / "ddtree").glob("*.patch"))
    for f in doc["files"]:
        if f["kind"] == "modify":
            (ours / f["path"]).parent.mkdir(parents=True, exist_ok=True)
            (ours / f["path"]).write_bytes(releases.data(NEW, f["path"]))
    subprocess.run(["git", "apply", *map(str, patches)], cwd=ours, check=True)
    labels = ["ddtree@3.1.0 (ours)", f"sglang {NEW} (base)", f"sglang {OLD} (theirs)"]
    merged = identical = 0
    for f in doc["files"]:
        lands = f["renamed_to"] or f["path"]
        if f["kind"] != "modify" or f["outcome"] == "gone" and not f["renamed_to"]:
            continue
        sides = tmp_path / "sides" / str(merged)
        sides.mkdir(parents=True)
        for name, data in (
            ("ours", (ours / f["path"]).read_bytes()),
            ("base", releases.data(NEW, f["path"])),
            ("theirs", releases.data(OLD, lands)),
        ):
            (sides / name).write_bytes(data)
        git = subprocess.run(
            [
                "git",
                "merge-file",
                "-p",
                "--diff3",
                *[a for n in labels for a in ("-L", n)],
                "ours",
                "base",
                "theirs",
            ],
            cwd=sides,
            capture_output=True,
        )
        merged += 1
        identical += (scratch / "files" / lands).read_bytes() == git.stdout and f[
            "conflicts"
        ] == git.returncode
        # a file whose merge conflicts has a conflicting hunk, and only such a file
        assert ("conflict" in [h["outcome"] for h in f["hunks"]]) == (git.returncode > 0), f["path"]
    assert merged >= 8 and (identical, merged) == (merged, merged), (
        f"{identical} of {merged} identical to git"
    )


def test_continue_writes_against_the_wheel_not_the_editable_release_copy_and_keeps_the_old_version(
    ws, releases, edits
):
    """A line appended to the scratch copy port/NAME/release/ changes nothing: --continue writes and
    checks the patches against 0.5.23's wheel, so `check --wheel` takes the set. The workspace has
    no git: the version the port replaces is kept in patchsets/.history/, named by list and show."""
    e = edits["conflict"]
    write_set(ws.root, "portfix", {"0001-conflict.patch": patch_of(releases, e)})
    ws.pk("port", "portfix", "--to", NEW, *both_wheels(), check=1)
    scratch = ws.root / "port" / "portfix"
    copy = scratch / "release" / e.path
    copy.write_bytes(copy.read_bytes() + b"# appended to the scratch copy\n")
    conflicted = (scratch / "files" / e.path).read_text()
    resolved = re.sub(
        r"<<<<<<< .*? \(ours\)\n(.*?)\|\|\|\|\|\|\| .*?>>>>>>> [^\n]*\n", r"\1", conflicted, flags=re.S
    )
    (scratch / "files" / e.path).write_text(resolved)
    done = ws.pk("port", "portfix", "--continue").stdout
    ws.pk("check", "portfix", "--wheel", str(wheel(NEW)))  # exit 0: the set applies to the release itself
    assert f"note: {scratch}/release/{e.path} is not sglang {NEW}'s file" in done
    assert (
        "updated portfix@1.1.0 (was 1.0.0)" in done
        and "kept portfix@1.0.0 in patchsets/.history/portfix/1.0.0" in done
    )
    kept = ws.root / "patchsets" / ".history" / "portfix" / "1.0.0"
    assert f'package_version = "=={OLD}"' in (kept / "patchset.toml").read_text()
    assert (kept / "0001-conflict.patch").read_bytes() == patch_of(releases, e)
    listed = {s["name"]: s for s in json.loads(ws.pk("list", "--json").stdout)}
    assert listed["portfix"]["version"] == "1.1.0" and listed["portfix"]["kept"] == ["1.0.0"]
    assert "kept      portfix@1.0.0" in ws.pk("show", "portfix").stdout


def test_a_wheel_file_is_given_only_as_its_own_record_hashes_it(tmp_path):
    good = make_wheel(tmp_path / "good", "demo", "1.0", {"demo/a.py": b"A = 1\n", "demo/b.py": b"B = 1\n"})
    bad = tmp_path / "bad" / good.name
    bad.parent.mkdir()
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(bad, "w") as dst:
        for info in src.infolist():  # demo/b.py altered, RECORD as it was
            dst.writestr(info, b"B = 2\n" if info.filename == "demo/b.py" else src.read(info))
    with wheels.Wheel(bad) as w:
        assert w.verified_file("demo/a.py") == (b"A = 1\n", 0o644) and w.verified_file("demo/nope.py") is None
        with pytest.raises(BadInput, match="demo/b.py does not match its RECORD"):
            w.verified_file("demo/b.py")
