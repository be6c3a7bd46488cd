"""git's own diff forms through import, apply, export and rollback, compared with git itself: renames,
copies, binary patches (literal and delta), mode changes, spaced and quoted names; and a patch over
the 32 MiB a .patch may hold, cut by file at import."""

from __future__ import annotations

import json
import os
import random
import shutil
import stat
import subprocess
from pathlib import Path

from conftest import edit_file, tree

CO = "sglang/kernels/ops/attention/dsv4/asm/gfx950/mla_v4/mla_a8w8_qh64_qseqlen1_gqaratio64_nm.co"
SPEC = "sglang/srt/speculative/spec_info.py"
UTILS = "sglang/srt/speculative/spec_utils.py"
EAGLE = "sglang/srt/speculative/eagle_info.py"
VERSION = "sglang/version.py"
BLOB, OLD_BLOB = "sglang/blob.bin", "sglang/old.bin"
SPACED = "sglang/plan b.py"


def git(repo: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        check=True,
        capture_output=True,
        **kw,
    )


def files_of(root: Path) -> dict[str, tuple[bytes, int]]:
    """Bytes and mode of every file below root but .git and bytecode."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in (".git", "__pycache__")]
        for name in filenames:
            p = Path(dirpath) / name
            out[p.relative_to(root).as_posix()] = (p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
    return out


def _forms_repo(env, tmp_path: Path) -> tuple[Path, bytes]:
    """A git repo holding some of the site's files as they are, then every form changed; the diff
    `git diff --cached --binary -M -C -C` writes of it."""
    rng = random.Random(33)
    blob = rng.randbytes(20000)
    for rel, data in ((BLOB, blob), (OLD_BLOB, b"\0old\0" * 100), (SPACED, b"PLAN = 'a'\n")):
        (env.site / rel).write_bytes(data)  # files of the target before its baseline
    env.pk("snapshot", "--name", "before", "--accept-edits")
    repo = tmp_path / "repo"
    for rel in (CO, SPEC, UTILS, EAGLE, VERSION, BLOB, OLD_BLOB, SPACED):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(env.site / rel, repo / rel)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "site")
    spec = (repo / SPEC).read_bytes()
    (repo / SPEC).unlink()
    (repo / "sglang/srt/speculative/spec_info_v2.py").write_bytes(spec.replace(b"DFLASH", b"DFLASH2", 1))
    (repo / CO).rename(repo / "sglang/kernels/renamed.co")
    (repo / "sglang/srt/speculative/spec_utils_copy.py").write_bytes(
        (repo / UTILS).read_bytes() + b"# copied\n"
    )
    changed = bytearray(blob)
    changed[10000:10010] = b"0123456789"
    (repo / BLOB).write_bytes(bytes(changed))
    (repo / "sglang/new.bin").write_bytes(b"\0\1\2new" * 50)
    (repo / OLD_BLOB).unlink()
    (repo / VERSION).chmod(0o755)
    (repo / SPACED).rename(repo / "sglang/plan c.py")
    (repo / "sglang/new thing.py").write_bytes(b"NEW = 1\n")
    (repo / "sglang/caf\u00e9.py").write_bytes(b"CAFE = 1\n")
    (repo / EAGLE).unlink()
    git(repo, "add", "-A")
    return repo, git(repo, "diff", "--cached", "--binary", "-M", "-C", "-C").stdout


def test_git_s_renames_copies_binaries_and_modes_import_apply_export_and_roll_back(env, tmp_path):
    repo, diff = _forms_repo(env, tmp_path)
    for form in (
        b"rename from sglang/srt/speculative/spec_info.py",
        b"similarity index 100%",
        b"copy from sglang/srt/speculative/spec_utils.py",
        b"GIT binary patch\nliteral ",
        b"GIT binary patch\ndelta ",
        b"old mode 100644\nnew mode 100755",
        b'"b/sglang/caf\\303\\251.py"',
        b"diff --git a/sglang/new thing.py b/sglang/new thing.py",
        b"deleted file mode 100644",
    ):
        assert form in diff, form
    (tmp_path / "forms.patch").write_bytes(diff)
    before = env.snapshot()
    env.pk("import", "forms", str(tmp_path / "forms.patch"))
    shown = {
        d["path"]: (d["kind"], d.get("source"), d.get("binary", False))
        for d in json.loads(env.pk("show", "forms", "--json").stdout)["diffstat"]
    }
    assert shown["sglang/srt/speculative/spec_info_v2.py"] == ("rename", SPEC, False)
    assert shown["sglang/srt/speculative/spec_utils_copy.py"] == ("copy", UTILS, False)
    assert shown["sglang/kernels/renamed.co"] == ("rename", CO, False)
    assert shown[BLOB] == ("modify", None, True) and shown["sglang/new.bin"] == ("add", None, True)
    assert shown[OLD_BLOB] == ("delete", None, True) and shown["sglang/caf\u00e9.py"][0] == "add"

    env.pk("apply", "forms", "--no-verify")
    wanted = files_of(repo)
    site = files_of(env.site)
    assert {rel: site.get(rel) for rel in wanted} == wanted  # bytes and modes, as git left them in the repo
    for gone in (SPEC, CO, OLD_BLOB, SPACED, EAGLE):
        assert not (env.site / gone).exists()  # a rename is a removal and an addition in the manifest

    exported = tmp_path / "exported.patch"
    exported.write_bytes(env.pk_bytes("export", "forms"))
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    git(clone, "apply", str(exported))
    assert files_of(clone) == wanted  # git apply of the export gives the same bytes and modes

    env.pk("rollback", "--to", "before", "--no-verify")
    assert env.snapshot() == before


def test_a_binary_patch_for_other_bytes_is_refused_as_git_apply_refuses_it(env, tmp_path):
    repo, diff = _forms_repo(env, tmp_path)
    (tmp_path / "forms.patch").write_bytes(diff)
    env.pk("import", "forms", str(tmp_path / "forms.patch"))
    edit_file(env.site / BLOB, b"\0other bytes")
    proc = subprocess.run(
        ["git", "apply", "--check", str(tmp_path / "forms.patch")],
        cwd=env.site,
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0 and BLOB in proc.stderr  # git refuses it too
    before = env.snapshot()
    err = env.pk("apply", "forms", "--no-verify", "--force", check=2).stderr
    assert f"{BLOB}: the binary patch is for blob" in err, err
    assert env.snapshot() == before


def _big_patch(files: int, lines: int) -> bytes:
    """A git diff adding `files` Python files of `lines` lines each."""
    body = "".join(
        f"+VALUE_{i} = {i * 7919}  # a line of generated code to make the diff large\n" for i in range(lines)
    )
    return "".join(
        f"diff --git a/sglang/big_{n}.py b/sglang/big_{n}.py\nnew file mode 100644\n"
        f"--- /dev/null\n+++ b/sglang/big_{n}.py\n@@ -0,0 +1,{lines} @@\n{body}"
        for n in range(files)
    ).encode()


def test_a_patch_over_32_mib_is_cut_by_file_and_applies(baselined, tmp_path):
    env = baselined
    patch = tmp_path / "big.patch"
    patch.write_bytes(_big_patch(36, 14000))  # 36 files of 1 MB
    assert os.path.getsize(patch) > 33 << 20
    assert "36 file(s)" in env.pk("import", "big", str(patch)).stdout
    pieces = sorted(p.name for p in (env.root / "patchsets/big").glob("*.patch"))
    assert pieces == ["big-001.patch", "big-002.patch"]
    assert b"".join((env.root / "patchsets/big" / p).read_bytes() for p in pieces) == patch.read_bytes()
    env.pk("check", "big")
    env.pk("apply", "big", "--no-verify")
    assert (env.site / "sglang/big_35.py").read_bytes().count(b"\n") == 14000
    exported = env.pk_bytes("export", "big")
    assert exported.endswith(patch.read_bytes())


def test_one_file_s_diff_over_32_mib_is_refused_at_import(env, tmp_path):
    patch = tmp_path / "huge.patch"
    patch.write_bytes(_big_patch(1, 470000))
    before = tree(env.root)
    err = env.pk("import", "huge", str(patch), check=2).stderr
    assert (
        "one file's diff (from one `diff --git` line to the next) holds" in err
        and "over the 32 MiB a .patch may hold" in err
        and "big_0.py" in err
    )
    assert tree(env.root) == before
