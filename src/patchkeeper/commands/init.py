"""`patchkeeper init`: a new workspace (patchkeeper.toml, the shipped patch sets, snapshots/)."""

from __future__ import annotations

import json
import shutil
from importlib import resources
from pathlib import Path

from ..errors import BadInput, NotInstalled, Refused, TargetError
from ..targets import open_target
from ..workspace import CONFIG, TargetConfig
from . import answer, answers_json

_TOML = """\
# A patchkeeper workspace: the targets patchkeeper changes. Every key: docs/configuration.md.
{default}
# inventory = "hosts.yml"                 # targets from an Ansible inventory (docs/fleet.md)

[defaults]                                # what every target inherits unless it sets its own
package = {package}

[defaults.vars]                           # values for the patch sets' templates, {{{{ name }}}} in their files
draft_model_path = "/models/Qwen3.6-27B-DFlash"   # set yours: the dflash and ddtree units load it

{local}
# An SSH target: the host needs only its Python; its key must be in ~/.ssh/known_hosts.
# [targets.gpu1]
# ssh = "gpu1"                            # an alias from ~/.ssh/config, or user@host[:port]
# python = "/opt/sglang-venv/bin/python"  # on that host
# [targets.gpu1.files]
# unit = "/etc/systemd/system/sglang-qwen.service"

# Restart and verify the service after each change; a change that fails is rolled back by itself
# (docs/verify-and-roll-back.md). Here for every target; a [targets.NAME.service] overrides keys.
# [defaults.service]
# restart = "systemctl daemon-reload && systemctl restart sglang-qwen.service"
# logs = "journalctl -u sglang-qwen.service --since @$PATCHKEEPER_SINCE --no-pager"
# base_url = "http://127.0.0.1:30000"

# Sets of targets for -g: patchkeeper apply ddtree -g gpus
# [groups]
# gpus = ["gpu1", "gpu2"]
"""

_LOCAL = """\
[targets.local]
python = {python}   # the interpreter whose site-packages holds the package

[targets.local.files]
# No unit yet: this one, in the workspace, does not exist, and the patch sets' drop-in is written beside
# it (sglang-qwen.service.d/) for a look. On a server: the service's unit, /etc/systemd/system/NAME.service.
unit = "sglang-qwen.service"
"""


UNIT_NOTE = (
    "note: target local's unit role is {unit}, which does not exist: a patch set's drop-in is written "
    "beside it for a look, and nothing restarts; set unit = ... in [targets.local.files] to the service's "
    "unit (/etc/systemd/system/NAME.service) once it has one"
)


def shipped() -> Path:
    """The patch sets that come with patchkeeper: package data of the wheel (patchkeeper/shipped),
    or a source checkout's patchsets/ (an editable install)."""

    packaged = resources.files("patchkeeper") / "shipped"
    if packaged.is_dir():
        return Path(str(packaged))
    checkout = Path(__file__).resolve().parents[3] / "patchsets"
    if checkout.is_dir():
        return checkout
    raise Refused(
        "this installation of patchkeeper has no shipped patch sets",
        "reinstall it from its wheel or a checkout of its repository",
    )


def check_python(python: str, package: str) -> str | None:
    """Refuse a --python that is not an interpreter patchkeeper's agent runs in (a missing path, a
    directory, a text file, /bin/true, a Python too old for it); the note to print when it is one but
    `package` is not installed there yet, else None."""
    path = Path(python).expanduser().absolute()
    hint = "give the interpreter of the venv that holds the package: --python VENV/bin/python"
    if not path.exists():
        raise BadInput(f"--python {python}: no such file", hint)
    if path.is_dir():
        raise BadInput(f"--python {python} is a directory", f"{hint} (e.g. {path / 'bin' / 'python'})")
    target = open_target(TargetConfig("local", str(path), package))
    try:
        target.info  # noqa: B018
    except NotInstalled:
        return (
            f"note: {package} is not installed in {python} yet (wrong venv?): install it there "
            f"(`{python} -m pip install {package}`) before the first change"
        )
    except TargetError as exc:
        raise BadInput(
            f"--python {python} is not a Python that patchkeeper can run in: {exc.message}", hint
        ) from None
    except OSError as exc:  # not executable, or not a program at all (a text file)
        raise BadInput(f"--python {python} cannot be run: {exc.strerror or exc}", hint) from None
    finally:
        target.close()
    return None


@answers_json
def init(root: Path, python: str | None, package: str, as_json: bool = False) -> int:
    """Write a workspace into `root`; refuse (overwriting nothing) where one is already. --json:
    {"workspace", "config", "patchsets", "python", "note"}."""
    there = [name for name in (CONFIG, "patchsets", "snapshots") if (root / name).exists()]
    if there:
        raise Refused(
            f"{root} already holds a workspace ({', '.join(there)}); nothing was written",
            "run init in an empty directory, or edit the patchkeeper.toml that is there",
        )
    note = check_python(python, package) if python is not None else None
    source = shipped()
    root.mkdir(parents=True, exist_ok=True)
    if python is not None:
        local = _LOCAL.format(python=json.dumps(str(Path(python).expanduser())))
        default = 'default_target = "local"'
    else:
        local = "# " + _LOCAL.format(python='"/path/to/venv/bin/python"').replace("\n", "\n# ").rstrip("# ")
        default = '# default_target = "local"                # the target of a verb given no -t'
    text = _TOML.format(default=default, package=json.dumps(package), local=local)
    with open(root / CONFIG, "x", encoding="utf-8") as f:  # "x": a second init racing this one loses
        f.write(text)
    shutil.copytree(source, root / "patchsets", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (root / "snapshots").mkdir()
    names = sorted(p.name for p in (root / "patchsets").iterdir() if (p / "patchset.toml").is_file())
    print(f"wrote a workspace in {root}: {CONFIG}, patchsets/ ({', '.join(names)}), snapshots/")
    answer(workspace=str(root), config=str(root / CONFIG), patchsets=names, python=python, note=note)
    if note:
        print(note)
    if python is not None:
        print(UNIT_NOTE.format(unit=root / "sglang-qwen.service"))
        answer(unit_note=UNIT_NOTE.format(unit=root / "sglang-qwen.service"))
    if python is None:
        print(
            "next: set python = ... of a target in patchkeeper.toml (patchkeeper init --python VENV/bin/python "
            "writes one), then `patchkeeper audit`"
        )
    elif note:  # the package is not there: nothing to audit or apply yet
        print(
            f"next: install {package} with that python, or set python = ... in {CONFIG} to the venv that "
            "holds it; then `patchkeeper audit`"
        )
    else:
        print(
            "next: `patchkeeper audit`, then `patchkeeper apply NAME --dry-run` (git init here keeps each "
            "change's history under snapshots/)"
        )
    return 0
