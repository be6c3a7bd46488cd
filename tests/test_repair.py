"""`patchkeeper repair` on real wheels (six, markupsafe's .so, pip's console scripts), locally and over
SSH, and adopting a hand-patched host before its first baseline (--restore-pristine, --accept-edits)."""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import os
import re
import subprocess
import zipfile
from pathlib import Path

import pytest
from conftest import SITE_REL, copy_venv, edit_file, fingerprinted, make_workspace, tree
from helpers import NO_INDEX, WHEELS, wheel
from sshd import sshd, write_client_config  # noqa: F401 (sshd is a fixture)

SO = "markupsafe/_speedups.cpython-311-x86_64-linux-gnu.so"


@pytest.fixture
def renv(tmp_path, repair_pristine):
    return make_workspace(tmp_path / "ws", copy_venv(repair_pristine, tmp_path / "venv"))


def record_sha256(site: Path, dist_info: str) -> dict[str, str]:
    with open(site / dist_info / "RECORD", newline="") as f:
        return {row[0]: row[1] for row in csv.reader(f) if len(row) > 1 and row[1]}


def sha256_row(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def log_kinds(env, target="local") -> list[str]:
    return [e["kind"] for e in json.loads(env.pk("log", "-t", target, "--json").stdout)]


def test_repair_restores_six_and_markupsafe_so_byte_exact_and_rollback_puts_the_damage_back(
    renv, repair_pristine, tmp_path
):
    site, pristine_site = renv.site, repair_pristine / SITE_REL
    damaged_six = (site / "six.py").read_bytes().replace(b"def ", b"def  ", 3)
    edit_file(site / "six.py", damaged_six)
    damaged_so = b"\x7fELF" + b"\0" * 1000
    edit_file(site / SO, damaged_so)
    (site / "markupsafe/_native.py").unlink()
    assert renv.pk("audit", check=1).returncode == 1

    out = renv.pk("repair", "six", "--wheel", str(wheel("six-1.17.0-*.whl"))).stdout
    assert "  M six.py  34703 bytes, checked against RECORD" in out and "(--wheel)" in out
    assert (site / "six.py").read_bytes() == (pristine_site / "six.py").read_bytes()
    assert sha256_row((site / "six.py").read_bytes()) == record_sha256(site, "six-1.17.0.dist-info")["six.py"]

    # the workspace's wheels directory; pip could find nothing (an empty find-links), so it is not what ran
    (tmp_path / "empty").mkdir()
    toml = (renv.root / "patchkeeper.toml").read_text()
    (renv.root / "patchkeeper.toml").write_text(f'wheels = "{os.path.relpath(WHEELS, renv.root)}"\n' + toml)
    out = renv.pk("repair", "markupsafe", env={**NO_INDEX, "PIP_FIND_LINKS": str(tmp_path / "empty")}).stdout
    assert "the workspace's wheels directory" in out and "2 file(s) restored" in out
    record = record_sha256(site, "markupsafe-3.0.4.dist-info")
    for rel in (SO, "markupsafe/_native.py"):
        assert (site / rel).read_bytes() == (pristine_site / rel).read_bytes()
        assert sha256_row((site / rel).read_bytes()) == record[rel]
    assert (site / SO).stat().st_mode & 0o777 == (pristine_site / SO).stat().st_mode & 0o777
    assert renv.pk("audit", "--json").returncode == 0
    assert log_kinds(renv) == ["repair", "repair", "baseline"]
    repair_six = json.loads(renv.pk("log", "--json").stdout)[1]
    assert repair_six["extra"]["dist"] == "six" and "%six.py" in repair_six["extra"]["env"]
    assert fingerprinted(renv) == [("baseline", True), ("repair", True), ("repair", True)]

    renv.pk("rollback", "--to", "previous")  # undoes the markupsafe repair: its damage is back, byte for byte
    assert (site / SO).read_bytes() == damaged_so and not (site / "markupsafe/_native.py").exists()
    assert (site / "six.py").read_bytes() == (pristine_site / "six.py").read_bytes()
    renv.pk("rollback", "--to", repair_six["id"])  # a repair's own id: the state before it
    assert (site / "six.py").read_bytes() == damaged_six
    renv.pk("rollback", "--to", "previous", "--dry-run")
    assert (site / "six.py").read_bytes() == damaged_six
    assert renv.pk("repair", "six", "--dry-run", "--wheel", str(wheel("six-1.17.0-*.whl"))).returncode == 0
    assert (site / "six.py").read_bytes() == damaged_six
    # damaged again by hand, repaired again: undoing that repair gives back these bytes, not the older damage
    damaged_again = b"six = None\n"
    edit_file(site / "six.py", damaged_again)
    renv.pk("repair", "six", "--wheel", str(wheel("six-1.17.0-*.whl")))
    renv.pk("rollback", "--to", "previous")
    assert (site / "six.py").read_bytes() == damaged_again
    # the managed package's manifest never names files of other distributions
    manifests = list((renv.root / "snapshots/local/manifests").iterdir())
    assert manifests and not any(b"six.py" in m.read_bytes() for m in manifests)
    assert renv.pk("status").stdout.strip().endswith("files match the recorded state")


def test_repair_refuses_a_wheel_of_another_version_or_other_bytes(renv, tmp_path):
    site = renv.site
    edit_file(site / "six.py", b"broken = True\n")
    before = tree(renv.venv)
    proc = renv.pk(
        "repair", "six", "--wheel", str(WHEELS / "older" / "six-1.16.0-py2.py3-none-any.whl"), check=2
    )
    assert (
        "six-1.16.0-py2.py3-none-any.whl is six 1.16.0, not six 1.17.0" in proc.stderr
        and "hint:" in proc.stderr
    )

    tampered = tmp_path / "six-1.17.0-py2.py3-none-any.whl"  # the release, with six.py not as released
    with zipfile.ZipFile(wheel("six-1.17.0-*.whl")) as src, zipfile.ZipFile(tampered, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            dst.writestr(info, data + b"# not the release\n" if info.filename == "six.py" else data)
    proc = renv.pk("repair", "six", "--wheel", str(tampered), check=2)
    assert "does not match the installed RECORD in six.py" in proc.stderr
    proc = renv.pk("repair", "six", env={**NO_INDEX, "PIP_FIND_LINKS": str(tmp_path / "nowhere")}, check=2)
    assert "no wheel of six 1.17.0 for local" in proc.stderr
    assert (
        f"`{renv.venv}/bin/python -m pip download --no-deps" in proc.stderr
        and "` failed (exit 1)" in proc.stderr
    )
    assert (
        tree(renv.venv) == before and not (renv.state_dir / "ledger").exists()
    )  # nothing changed, no baseline
    assert renv.pk("repair", "sglang", check=2).stderr.count("rollback --to baseline") == 1


def test_repair_downloads_the_wheel_for_the_target_interpreter_with_pip(renv, repair_pristine, tmp_path):
    links = tmp_path / "links"
    links.mkdir()
    (links / wheel("markupsafe-3.0.4-*.whl").name).symlink_to(wheel("markupsafe-3.0.4-*.whl"))
    edit_file(renv.site / SO, b"not an ELF file")
    out = renv.pk("repair", "markupsafe", env={**NO_INDEX, "PIP_FIND_LINKS": str(links)}).stdout
    assert "(pip download)" in out and f"  M {SO}" in out
    assert (renv.site / SO).read_bytes() == (repair_pristine / SITE_REL / SO).read_bytes()


def test_repair_regenerates_console_scripts_the_installer_wrote_or_names_them(renv, repair_pristine):
    import ensurepip

    bundled = sorted((Path(ensurepip.__file__).parent / "_bundled").glob("pip-*.whl"))
    version = subprocess.run(
        [str(renv.venv / "bin/python"), "-m", "pip", "--version"], capture_output=True, text=True
    ).stdout.split()[1]
    if not any(p.name.startswith(f"pip-{version}-") for p in bundled):
        pytest.skip(f"the venv's pip {version} is not the wheel this Python bundles")
    pip_wheel = next(p for p in bundled if p.name.startswith(f"pip-{version}-"))
    pip3, pip = renv.venv / "bin/pip3", renv.venv / "bin/pip"
    shebang = pip3.read_bytes().split(b"\n", 1)[0]
    edit_file(pip3, shebang + b"\nbroken\n")  # its interpreter line survives: the launcher is regenerated
    edit_file(pip, b"garbage\n")  # nothing says which interpreter it was written for
    proc = renv.pk("repair", "pip", "--wheel", str(pip_wheel), check=1)
    assert "  M ../../../bin/pip3  " in proc.stdout
    assert "  ! ../../../bin/pip  left as it is: a script the installer wrote" in proc.stdout
    assert pip3.read_bytes() == (repair_pristine / "bin/pip3").read_bytes()
    assert pip.read_bytes() == b"garbage\n"


def test_repair_over_ssh_sends_the_bytes_to_the_host(tmp_path, repair_pristine, sshd):  # noqa: F811
    write_client_config(Path(os.environ["HOME"]), sshd, ["ct129"])
    venv = copy_venv(repair_pristine, tmp_path / "venv-ct129")
    env = make_workspace(
        tmp_path / "ws",
        tmp_path / "venv-local",
        f'\n[targets.ct129]\nssh = "ct129"\npython = "{venv}/bin/python"\npackage = "sglang"\n',
    )
    site = venv / SITE_REL
    damaged = b"\x7fELF" + b"\1" * 64
    edit_file(site / SO, damaged)
    out = env.pk(
        "repair", "markupsafe", "-t", "ct129", "--wheel", str(wheel("markupsafe-3.0.4-*.whl"))
    ).stdout
    assert f"  M {SO}" in out
    assert (site / SO).read_bytes() == (repair_pristine / SITE_REL / SO).read_bytes()
    assert log_kinds(env, "ct129") == ["repair", "baseline"]
    env.pk("rollback", "-t", "ct129", "--to", "previous")
    assert (site / SO).read_bytes() == damaged


def test_repair_with_a_wheel_whose_member_fails_its_crc_changes_nothing(renv, tmp_path):
    edit_file(renv.site / "six.py", b"broken = True\n")
    before = tree(renv.venv)
    corrupt = tmp_path / "six-1.17.0-py2.py3-none-any.whl"  # a download damaged in transit
    data = bytearray(wheel("six-1.17.0-*.whl").read_bytes())
    with zipfile.ZipFile(wheel("six-1.17.0-*.whl")) as whl:
        info = whl.getinfo("six.py")
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    data[start + info.compress_size // 2] ^= 0xFF
    corrupt.write_bytes(bytes(data))
    proc = renv.pk("repair", "six", "--wheel", str(corrupt), check=2)
    assert proc.stderr.startswith(
        f"patchkeeper: error: the wheel {corrupt} is damaged: its member six.py cannot be read"
    ), proc.stderr
    assert "nothing was changed" in proc.stderr and "download the wheel again" in proc.stderr
    assert tree(renv.venv) == before and not (renv.state_dir / "ledger").exists()


# ---- adopting a hand-patched host ----------------------------------------------------------------
SPEC = "sglang/srt/speculative/spec_info.py"


@pytest.fixture
def handmade(env):
    """A fresh copy with files changed by hand (scp'd in) before patchkeeper ever ran there."""
    edit_file(env.site / SPEC, (env.site / SPEC).read_bytes() + b"# copied in by scp\n")
    edit_file(env.site / "sglang/srt/speculative/ddtree_by_hand.py", b"TREE = 1\n")
    return env


def test_first_baseline_over_hand_edits_is_refused_naming_them(handmade):
    before = tree(handmade.venv)
    for args in (["apply", "ddtree"], ["apply", "ddtree", "--dry-run"], ["snapshot", "--name", "x"]):
        err = handmade.pk(*args, check=2).stderr
        assert (
            f"{SPEC} (changed)" in err and "ddtree_by_hand.py (added)" in err and "--restore-pristine" in err
        )
    assert tree(handmade.venv) == before and not (handmade.state_dir / "ledger").exists()


def test_restore_pristine_gives_the_release_as_baseline(handmade, pristine_venv):
    toml = (handmade.root / "patchkeeper.toml").read_text()
    (handmade.root / "patchkeeper.toml").write_text(f'wheels = "{WHEELS}"\n' + toml)
    out = handmade.pk("apply", "ddtree", "--restore-pristine", "--no-verify").stdout
    assert "1 hand-edited file(s) restored to the release's bytes from sglang-0.5.23-" in out
    assert (
        "1 file(s) the release does not have removed (backed up): sglang/srt/speculative/ddtree_by_hand.py"
        in out
    )
    handmade.pk("rollback", "--to", "baseline", "--no-verify")
    assert tree(handmade.venv) == tree(pristine_venv)
    base = json.loads(handmade.pk("log", "--json").stdout)[-1]
    assert base["kind"] == "baseline" and base["extra"]["adopted"] == "restore-pristine"
    assert sorted(base["hand_edits"]) == ["sglang/srt/speculative/ddtree_by_hand.py", SPEC]
    digest = base["extra"]["replaced"][SPEC][0]  # the scp'd bytes come back by a prefix of their digest
    assert handmade.pk("show-backup", digest.partition(":")[2][:10]).stdout.endswith("# copied in by scp\n")
    shown = re.findall(r"blake3:[0-9a-f]+\u2026", handmade.pk("log").stdout)  # as `log` shows each, cut short
    assert shown and all(handmade.pk("show-backup", d).stdout for d in shown)
    assert fingerprinted(handmade) == [("baseline", True), ("apply", True), ("rollback", True)]


def test_restore_pristine_dry_run_plans_on_the_restored_bytes(handmade):
    """The adoption doc's first command: a hand edit inside a hunk's lines fails that hunk on the
    edited bytes; the real run restores the release first, and so does the dry run's plan."""
    toml = (handmade.root / "patchkeeper.toml").read_text()
    (handmade.root / "patchkeeper.toml").write_text(f'wheels = "{WHEELS}"\n' + toml)
    spec = handmade.site / SPEC
    line = b"        return self == SpeculativeAlgorithm.DFLASH\n"
    assert spec.read_bytes().count(line) == 1
    edit_file(
        spec,
        spec.read_bytes().replace(
            line, b"        return self in (SpeculativeAlgorithm.DFLASH,)  # by hand\n"
        ),
    )
    before = tree(handmade.venv)
    handmade.pk("apply", "ddtree", "--dry-run", check=2)  # without the flag: refused, naming the edits
    out = handmade.pk("apply", "ddtree", "--dry-run", "--restore-pristine").stdout
    assert "it would restore the release's bytes first" in out and f"M {SPEC}" in out, out
    assert tree(handmade.venv) == before and not (handmade.state_dir / "ledger").exists()
    handmade.pk("apply", "ddtree", "--restore-pristine", "--no-verify")
    assert b"SpeculativeAlgorithm.DDTREE,\n" in spec.read_bytes() and b"# by hand" not in spec.read_bytes()


def test_accept_edits_records_them_and_the_ledger_says_so(handmade):
    edited = (handmade.site / SPEC).read_bytes()
    out = handmade.pk("snapshot", "--name", "adopted", "--accept-edits").stdout
    assert "2 hand edit(s) accepted as they are (--accept-edits)" in out
    base = json.loads(handmade.pk("log", "--json").stdout)[-1]
    assert base["extra"]["adopted"] == "accept-edits" and base["extra"]["edits"][SPEC] == "changed"
    assert (
        f"recorded as they are (--accept-edits): sglang/srt/speculative/ddtree_by_hand.py, {SPEC}"
        in handmade.pk("log").stdout
    )
    handmade.pk("apply", "nextn", "--no-verify")
    handmade.pk("rollback", "--to", "baseline", "--no-verify")
    assert (handmade.site / SPEC).read_bytes() == edited
    assert (handmade.site / "sglang/srt/speculative/ddtree_by_hand.py").exists()
    assert fingerprinted(handmade) == [
        ("baseline", True),
        ("snapshot", True),
        ("apply", True),
        ("rollback", True),
    ]


def test_repair_restores_a_wheels_headers_data_and_scripts_where_pip_put_them(renv, tmp_path):
    """A wheel's .data/headers, .data/data and .data/scripts, installed by pip into the venv's scheme
    paths (include/site/pythonX.Y/<dist>, the prefix, bin with its shebang rewritten), come back."""
    members = {
        "hdr_demo/__init__.py": b"X = 1\n",
        "hdr_demo-1.0.data/headers/hdr_demo.h": b"#define HDR_DEMO 1\n",
        "hdr_demo-1.0.data/headers/sub/inner.h": b"int inner(void);\n",
        "hdr_demo-1.0.data/data/share/hdr-demo/table.txt": b"a b c\n",
        "hdr_demo-1.0.data/scripts/hdr-demo-run": b"#!python\nprint('run')\n",
        "hdr_demo-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: hdr-demo\nVersion: 1.0\n",
        "hdr_demo-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    whl = tmp_path / "hdr_demo-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
        rows = "".join(f"{name},{sha256_row(data)},{len(data)}\n" for name, data in members.items())
        z.writestr("hdr_demo-1.0.dist-info/RECORD", rows + "hdr_demo-1.0.dist-info/RECORD,,\n")
    subprocess.run(
        [str(renv.venv / "bin/python"), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(whl)],
        check=True,
        capture_output=True,
    )
    headers = renv.venv / f"include/site/python{SITE_REL.split('python')[1].split('/')[0]}/hdr-demo"
    installed = [
        headers / "hdr_demo.h",
        headers / "sub/inner.h",
        renv.venv / "share/hdr-demo/table.txt",
        renv.venv / "bin/hdr-demo-run",
    ]
    released = {
        p: (p.read_bytes(), p.stat().st_mode & 0o777) for p in installed
    }  # the script: 0644, as in the zip
    assert released[installed[3]][0].startswith(f"#!{renv.venv}/bin/python".encode())
    for p in installed[:3]:
        edit_file(p, b"broken\n")
    installed[3].unlink()

    out = renv.pk("repair", "hdr-demo", "--wheel", str(whl)).stdout
    assert "4 file(s) restored" in out and "left" not in out
    assert f"  M ../../../{headers.relative_to(renv.venv)}/sub/inner.h  17 bytes" in out
    assert {p: (p.read_bytes(), p.stat().st_mode & 0o777) for p in installed} == released


def _with_wheels(env) -> None:
    toml = (env.root / "patchkeeper.toml").read_text()
    (env.root / "patchkeeper.toml").write_text(f'wheels = "{WHEELS}"\n' + toml)


def test_adoption_backups_show_in_log_come_back_by_prefix_and_become_a_patch_set(handmade, pristine_venv):
    _with_wheels(handmade)
    edited = {
        rel: (handmade.site / rel).read_bytes() for rel in (SPEC, "sglang/srt/speculative/ddtree_by_hand.py")
    }
    handmade.pk("snapshot", "--name", "adopted", "--restore-pristine")
    assert tree(handmade.venv) == tree(pristine_venv)
    line = next(l for l in handmade.pk("log").stdout.splitlines() if "--restore-pristine" in l)
    shown = dict(part.rstrip("…)").split(" (") for part in line.split(": ", 1)[1].split(", "))
    assert set(shown) == set(edited) and all(d.startswith("blake3:") for d in shown.values())
    for rel, digest in shown.items():  # the digests log shows are enough to get the bytes back
        assert handmade.pk("show-backup", digest.partition(":")[2]).stdout.encode() == edited[rel]

    out = handmade.pk("record", "byhand", "-t", "local", "--from-adoption").stdout
    assert "byhand@1.0.0" in out and "2 file(s)" in out
    handmade.pk("apply", "byhand", "--no-verify")  # on the pristine release: the hand edits, exactly
    assert {rel: (handmade.site / rel).read_bytes() for rel in edited} == edited
    assert handmade.pk("record", "again", "--from-adoption", "-t", "local", "-m", "x").returncode == 0


def test_the_hand_edits_accepted_at_adoption_become_a_patch_set_against_the_release(handmade, pristine_venv):
    _with_wheels(handmade)
    handmade.pk("snapshot", "--name", "adopted", "--accept-edits")
    handmade.pk("record", "byhand", "--from-adoption")
    patch = (handmade.root / "patchsets/byhand/byhand.patch").read_text()
    assert patch.count("diff --git ") == 2 and "+# copied in by scp\n" in patch and "+TREE = 1\n" in patch
    assert 'package_version = "==0.5.23"' in (handmade.root / "patchsets/byhand/patchset.toml").read_text()
    copy = handmade.root.parent / "pristine"
    copy_venv(pristine_venv, copy)
    env2 = make_workspace(handmade.root.parent / "ws2", copy)
    (env2.root / "patchsets/byhand").mkdir()
    for f in (handmade.root / "patchsets/byhand").iterdir():
        (env2.root / "patchsets/byhand" / f.name).write_bytes(f.read_bytes())
    env2.pk("apply", "byhand", "--no-verify")
    assert (copy / SITE_REL / SPEC).read_bytes() == (handmade.site / SPEC).read_bytes()


def test_a_target_adopted_without_hand_edits_has_none_to_record(baselined):
    env = baselined
    env.pk("snapshot", "--name", "first")
    proc = env.pk("record", "byhand", "--from-adoption", check=2)
    assert "target local was adopted without hand edits" in proc.stderr
