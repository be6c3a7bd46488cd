"""Code that runs without being imported by name, on the real sglang venv: a `.pth` file with an
import line, a `sitecustomize.py`, and a plugin of `sglang.srt.plugins` from a wheel made here."""

from __future__ import annotations

import json
import subprocess

import pytest
from conftest import copy_venv, make_workspace
from made_wheels import make_wheel, pip_install


@pytest.fixture
def senv(tmp_path, pristine_venv):
    return make_workspace(tmp_path / "ws", copy_venv(pristine_venv, tmp_path / "venv"))


def environment(env, check=None) -> dict:
    doc = json.loads(env.pk("audit", "--json", check=check).stdout)
    return {f["path"]: f for f in doc["findings"] if f["class"] == "environment"}


def test_pth_sitecustomize_and_plugins_are_recorded_and_a_new_one_is_found(senv, tmp_path):
    fp = json.loads(senv.pk("env", "--json").stdout)
    assert "pth $SITE/distutils-precedence.pth" in fp["startup"]  # setuptools' own, with an import line
    senv.pk("snapshot", "--name", "start")
    assert environment(senv, check=0) == {}

    (senv.site / "paths-only.pth").write_text("hooks\n")  # adds a directory, runs nothing itself
    (senv.site / "hooks").mkdir()
    (senv.site / "hooks" / "sitecustomize.py").write_text(
        "import os; os.environ['PK_SITECUSTOMIZED'] = '1'\n"
    )
    (senv.site / "zz-hook.pth").write_text("import os; os.environ.setdefault('PK_HOOKED', '1')\n")
    ran = subprocess.run(
        [
            str(senv.venv / "bin/python"),
            "-c",
            "import os; print(os.environ.get('PK_SITECUSTOMIZED'), os.environ.get('PK_HOOKED'))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert ran.stdout.split() == ["1", "1"]  # both run in every interpreter of the venv
    plugin = make_wheel(
        tmp_path / "w",
        "sgl-plugin-demo",
        "0.1",
        {"sgl_plugin_demo/__init__.py": b"def register():\n    pass\n"},
        entry_points="[sglang.srt.plugins]\ndemo = sgl_plugin_demo:register\n\n[console_scripts]\nx = y:z\n",
    )
    pip_install(senv.venv, plugin)

    found = environment(senv, check=1)
    assert set(found) == {
        "pth $SITE/zz-hook.pth",
        "sitecustomize $SITE/hooks/sitecustomize.py",
        "entry point sglang.srt.plugins demo",
        "sgl_plugin_demo-0.1.dist-info",
    }
    assert found["pth $SITE/zz-hook.pth"]["kind"] == "added"
    assert "import os; os.environ.setdefault('PK_HOOKED', '1')" in found["pth $SITE/zz-hook.pth"]["detail"]
    assert (
        "sgl_plugin_demo:register from sgl_plugin_demo 0.1"
        in found["entry point sglang.srt.plugins demo"]["detail"]
    )
    out = senv.pk("audit", check=1).stdout
    assert "environment drift in" in out and "pth $SITE/zz-hook.pth" in out

    proc = senv.pk("diff", "--env", "--against", "start", check=1)
    assert "  startup      added      pth $SITE/zz-hook.pth  runs in every interpreter" in proc.stdout
    assert "  startup      added      sitecustomize $SITE/hooks/sitecustomize.py" in proc.stdout
    assert "  startup      added      entry point sglang.srt.plugins demo" in proc.stdout
    assert "paths-only" not in proc.stdout
    screen = senv.pk("env").stdout
    assert "startup      2 .pth file(s) with import lines, 1 site hook(s), 1 plugin entry point(s)" in screen

    # recorded by a new state, then changed: a finding again
    senv.pk("snapshot", "--name", "hooked")
    assert environment(senv, check=0) == {}
    (senv.site / "zz-hook.pth").write_text("import os; os.system('true')\n")
    found = environment(senv, check=1)
    assert list(found) == ["pth $SITE/zz-hook.pth"] and found["pth $SITE/zz-hook.pth"]["kind"] == "changed"
