"""`check` says what `apply` would do: on a generated set of patch sets (paths outside the package,
bytecode, install records, stage names, unsafe modes, and good ones) check and apply give the same
exit code and the same reason; `check --wheel` and `port` find a file where the release has a directory."""

from __future__ import annotations

import itertools
import zipfile

from conftest import release_wheel

from patchkeeper.patchset import port

_ADD = "diff --git a/{p} b/{p}\nnew file mode {m}\n--- /dev/null\n+++ b/{p}\n@@ -0,0 +1 @@\n+x = 1\n"
_MODE = "diff --git a/{p} b/{p}\nold mode 100644\nnew mode {m}\n"

# Where a patch set writes (each with the reason apply refuses it, None: it applies) ...
PLACES = {
    "sglang/pk_agree_{i}.py": None,
    "pk_agree_{i}.pth": "not a file of package sglang",
    "pk_agree_{i}/x.py": "not a file of package sglang",
    "sglang/__pycache__/pk_agree_{i}.cpython-311.pyc": "bytecode, derived from sources",
    "sglang/pk_agree_{i}.pyc": "bytecode, derived from sources",
    "sglang/.pk-stage-{i}": "a stage file name of patchkeeper",
    "sglang-0.5.23.dist-info/RECORD": "an install record, written by the installer",
    "sglang-0.5.23.dist-info/INSTALLER": "an install record, written by the installer",
}
# ... and the mode it gives (a new file's, or a mode change of an existing file).
MODES = {
    "100644": None,
    "100755": None,
    "104755": "setuid, setgid or sticky",
    "102755": "setuid, setgid or sticky",
}


def _cases() -> list[tuple[str, str, str | None]]:
    """(name, patch text, the reason apply refuses it or None): every place with a plain mode, every
    unsafe mode on an added file and on a mode change of a file of the package."""
    out = []
    for i, (place, why) in enumerate(PLACES.items()):
        p = place.format(i=i)
        exists = p.endswith(("RECORD", "INSTALLER"))
        text = (
            f"diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n@@ -1 +1,2 @@\n+x\n FIRST\n"  # its first line
            if exists
            else _ADD.format(p=p, m="100644")
        )
        out.append((f"place{i}", text, why))
    for j, ((mode, why), add) in enumerate(itertools.product(list(MODES.items())[1:], (True, False))):
        p = f"sglang/pk_mode_{j}.py" if add else "sglang/README.md"
        out.append((f"mode{j}", (_ADD if add else _MODE).format(p=p, m=mode), why))
    return out


def _write(env, name: str, text: str) -> None:
    d = env.root / "patchsets" / name
    d.mkdir()
    (d / "patchset.toml").write_text(f'name = "{name}"\nversion = "1.0.0"\npackage = "sglang"\n')
    (d / "0001.patch").write_text(text)


def _first_line(path) -> str:
    return path.read_text().splitlines()[0]


def test_check_and_apply_agree_on_generated_patch_sets(baselined):
    env = baselined
    wheel = release_wheel("0.5.23")
    seen = set()
    before = env.snapshot()  # every case leaves the venv so: refused, or applied and rolled back
    for name, text, why in _cases():
        for rel in ("sglang-0.5.23.dist-info/RECORD", "sglang-0.5.23.dist-info/INSTALLER"):
            if rel in text:
                text = text.replace("FIRST", _first_line(env.site / rel))
        _write(env, name, text)
        check = env.pk("check", name, check=None)
        on_wheel = env.pk("check", name, "--wheel", str(wheel), check=None)
        if why is None:  # before the apply: a rollback would hide what check wrote
            assert env.snapshot() == before
        applied = env.pk("apply", name, "--no-verify", check=None)
        assert (check.returncode, applied.returncode) == ((0, 0) if why is None else (2, 2)), (
            name,
            check.stdout + check.stderr,
            applied.stderr,
        )
        if why is None:
            assert f"{name}@1.0.0: applies" in check.stdout and on_wheel.returncode == 0, on_wheel.stdout
            env.pk("rollback", "--to", "baseline", "--no-verify")
        else:
            assert why in applied.stderr and check.stderr == applied.stderr, (
                name,
                check.stderr,
                applied.stderr,
            )
            assert env.snapshot() == before  # neither check nor apply wrote anything
            assert on_wheel.returncode == 2 and why in on_wheel.stderr, (name, on_wheel.stderr)
            assert on_wheel.stderr.splitlines()[0] == applied.stderr.splitlines()[0]
        seen.add(why)
    assert seen == set(PLACES.values()) | set(MODES.values())  # every reason met


_DIR_FILE = "diff --git a/sglang/srt b/sglang/srt\nnew file mode 100644\n--- /dev/null\n+++ b/sglang/srt\n@@ -0,0 +1 @@\n+x\n"


def test_a_file_where_the_release_has_a_directory_does_not_check_on_a_wheel_either(baselined):
    """The target's check asks the target (a directory where the file goes: apply would refuse); the
    wheel's check finds the same in the wheel's names, and says it does not apply."""
    env = baselined
    _write(env, "dirfile", _DIR_FILE)
    on_target = env.pk("check", "dirfile", check=1)
    assert "sglang/srt is a directory" in on_target.stdout
    on_wheel = env.pk("check", "dirfile", "--wheel", str(release_wheel("0.5.23")), check=1)
    assert "sglang/srt is a directory in the release" in on_wheel.stdout
    assert "dirfile@1.0.0: does not apply" in on_wheel.stdout
    below = _DIR_FILE.replace("sglang/srt", "sglang/version.py/x.py")
    _write(env, "belowfile", below)
    on_wheel = env.pk("check", "belowfile", "--wheel", str(release_wheel("0.5.23")), check=1)
    assert "sglang/version.py/x.py is below sglang/version.py, a file in the release" in on_wheel.stdout
    env.pk("check", "belowfile", check=1)
    env.pk("apply", "belowfile", "--no-verify", check=2)


class _Release:
    version = "2.0"

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def site_file(self, rel: str) -> tuple[bytes, int] | None:
        return None

    def site_names(self) -> set[str]:
        return self.names


def test_port_finds_a_file_where_the_new_release_has_a_directory():
    with zipfile.ZipFile(release_wheel("0.5.23")) as z:
        names = {n for n in z.namelist() if not n.endswith("/")}
    problems, _ = port.check([("0001.patch", _DIR_FILE.encode())], _Release(names), [])
    assert "sglang/srt is a directory in the release, where the patch sets put a file" in problems
