"""patchkeeper as users install it (`uv tool install`, pipx: a venv of its own without pip): the verbs
that fetch release wheels (repair, apply --restore-pristine, port) work from there, with the target's
pip, else a pip or uv on PATH, under the user's pip configuration (PIP_* here), else say what to do."""

from __future__ import annotations

import ensurepip
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import PRISTINE, edit_file, tree
from installed import UV, clean_env

WHEELS = Path(os.environ.get("PK_WHEELS", PRISTINE.parents[1] / ".cache" / "wheels"))
SPEC = "sglang/srt/speculative/spec_info.py"


def wheel(pattern: str, under: Path = WHEELS) -> Path:
    found = sorted(under.glob(pattern))
    if not found:
        pytest.fail(f"{pattern} is missing from {under}: run `make test`, which downloads it")
    return found[0]


def links(tmp_path: Path, *wheels: Path) -> Path:
    """A find-links directory holding just these wheels."""
    where = tmp_path / "links"
    where.mkdir(exist_ok=True)
    for w in wheels:
        (where / w.name).symlink_to(w)
    return where


def offline(find_links: Path) -> dict[str, str]:
    """The user's pip configuration of these tests: no index, wheels from one directory (PIP_*)."""
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(find_links), "PIP_CONFIG_FILE": os.devnull}


def ipk(
    bin_dir: Path, root: Path, *args: str, env: dict[str, str], check: int | None = 0, path: str | None = None
) -> subprocess.CompletedProcess:
    """The installed `patchkeeper` (from its bin directory, no PYTHONPATH) on workspace `root`."""
    proc = subprocess.run(
        [str(bin_dir / "patchkeeper"), "-w", str(root), *args],
        capture_output=True,
        text=True,
        env=clean_env(bin_dir, path, **env),
    )
    if check is not None:
        assert proc.returncode == check, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_the_install_has_no_pip_and_runs_its_own_copy(installed_bin):
    python = str(installed_bin / "python")
    assert subprocess.run(
        [python, "-c", "import pip"], capture_output=True, env=clean_env(installed_bin)
    ).returncode
    where = subprocess.run(
        [python, "-c", "import patchkeeper; print(patchkeeper.__file__)"],
        capture_output=True,
        text=True,
        env=clean_env(installed_bin),
        check=True,
    ).stdout
    assert where.startswith(str(installed_bin.parent / "lib"))


@pytest.fixture
def with_six(env):
    """The workspace's venv (with pip, as venvs are) with six installed from its real wheel."""
    subprocess.run(
        [
            str(env.venv / "bin/python"),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            str(wheel("six-1.17.0-*.whl")),
        ],
        check=True,
        capture_output=True,
    )
    return env


def test_repair_from_an_install_without_pip_downloads_with_the_targets_pip(installed_bin, with_six, tmp_path):
    released = (with_six.site / "six.py").read_bytes()
    edit_file(with_six.site / "six.py", b"broken = True\n")
    out = ipk(
        installed_bin, with_six.root, "repair", "six", env=offline(links(tmp_path, wheel("six-1.17.0-*.whl")))
    )
    assert "(pip download)" in out.stdout and (with_six.site / "six.py").read_bytes() == released

    edit_file(with_six.site / "six.py", b"broken = True\n")  # the user's pip configuration is the one used
    err = ipk(
        installed_bin, with_six.root, "repair", "six", env=offline(tmp_path / "nowhere"), check=2
    ).stderr
    assert (
        f"`{with_six.venv}/bin/python -m pip download --no-deps --only-binary=:all:" in err
        and "six==1.17.0` failed" in err
    )
    assert "--wheel FILE" in err and "PIP_INDEX_URL" in err


def test_apply_restore_pristine_from_an_install_without_pip(installed_bin, env, pristine_venv):
    edit_file(env.site / SPEC, (env.site / SPEC).read_bytes() + b"# copied in by scp\n")
    out = ipk(
        installed_bin, env.root, "apply", "ddtree", "--restore-pristine", "--no-verify", env=offline(WHEELS)
    ).stdout
    assert "1 hand-edited file(s) restored to the release's bytes" in out
    ipk(installed_bin, env.root, "rollback", "--to", "baseline", "--no-verify", env={})
    assert tree(env.venv) == tree(pristine_venv)


def test_port_from_an_install_without_pip(installed_bin, env):
    proc = ipk(
        installed_bin,
        env.root,
        "port",
        "ddtree",
        "--to",
        "0.5.22",
        "--dry-run",
        "--json",
        env=offline(WHEELS / "port"),
        check=None,
    )
    assert proc.returncode in (0, 1), proc.stderr  # clean or conflicts: a report either way
    doc = json.loads(proc.stdout)
    assert doc["wheels"]["from"].startswith("pip download: sglang-0.5.23-")
    assert doc["wheels"]["to"].startswith("pip download: sglang-0.5.22-")


def test_without_any_pip_uv_on_path_runs_pip_else_the_error_says_what_to_do(
    installed_bin, with_six, tmp_path
):
    shutil.rmtree(
        with_six.site / "pip"
    )  # a target venv without pip (the copy's links; the pristine one keeps its)
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "uv").symlink_to(UV)
    for name in ("dirname", "realpath"):  # what the launchers of uv's environments call
        (tools / name).symlink_to(shutil.which(name) or f"/usr/bin/{name}")
    bundled = wheel("pip-*.whl", Path(ensurepip.__file__).parent / "_bundled")  # uv fetches pip from there
    conf = {
        **offline(links(tmp_path, wheel("six-1.17.0-*.whl"), bundled)),
        "UV_CACHE_DIR": str(tmp_path / "uv"),
        "UV_PYTHON_DOWNLOADS": "never",
    }
    released = (with_six.site / "six.py").read_bytes()
    edit_file(with_six.site / "six.py", b"broken = True\n")
    out = ipk(installed_bin, with_six.root, "repair", "six", env=conf, path=f"{installed_bin}:{tools}").stdout
    assert "(pip download)" in out and (with_six.site / "six.py").read_bytes() == released

    edit_file(with_six.site / "six.py", b"broken = True\n")
    before = tree(with_six.venv)
    err = ipk(
        installed_bin, with_six.root, "repair", "six", env=conf, path=str(installed_bin), check=2
    ).stderr
    assert "no pip to download six 1.17.0 for local" in err and "pip3 or pip on PATH, uv on PATH" in err
    assert (
        "install pip or uv" in err
        and "pip download --no-deps --only-binary=:all:" in err
        and "--wheel FILE" in err
    )
    assert err.count("--platform ") > 1 and "more --platform" not in err  # the command whole, to run
    assert tree(with_six.venv) == before
