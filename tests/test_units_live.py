"""patchkeeper's reading of unit files against a live systemd 252 manager (tests/livesystemd.py) on a generated
corpus of layouts (tests/unitcorpus.py): every layout is loaded and started by the manager with an executable
that records the argv and environment it really got, and the reading `status --json` reports for the same
files (units.as_dict of units.on_target) must equal it or say that it does not know, and why; never a
different definite answer."""

from __future__ import annotations

import json
import os
import string
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import unitcorpus
from livesystemd import LiveManager, below_root, record, why_not

from patchkeeper.checks import specifiers, units
from patchkeeper.targets.local import LocalTarget
from patchkeeper.workspace import SYSTEMD_UNIT_PATH, TargetConfig

REASON = why_not()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")
SET_BY_SYSTEMD = {"MANAGERPID", "INVOCATION_ID", "SYSTEMD_EXEC_PID"}


class Corpus:
    """The corpus loaded in one manager: each layout's outcome there and patchkeeper's reading."""

    def __init__(self, base: Path) -> None:
        self.roots = {"split": base / "split", "merged": base / "merged"}
        (self.roots["merged"] / "usr/lib").mkdir(parents=True)
        (self.roots["merged"] / "lib").symlink_to("usr/lib")  # merged /usr, as Debian 12 installs it
        self.unit_path = tuple(str(p) for r in self.roots.values() for p in below_root(r, SYSTEMD_UNIT_PATH))
        self.manager = LiveManager.start(base / "manager", [Path(p) for p in self.unit_path])
        self.layouts = unitcorpus.layouts(str(self.manager.recorder))
        for layout in self.layouts:
            root = self.roots[layout.root]
            self.manager.write(root, dict(unitcorpus.iter_files(layout, str(root))))
        # what every process gets from the manager (its environment, environment.d's generators, PATH)
        self.manager.write(
            self.roots["split"],
            {f"{unitcorpus.UL}/baseline.service": f"[Service]\nExecStart={self.manager.recorder}\n"},
        )
        self.manager.daemon_reload()
        self.manager.start_unit("baseline.service")
        self.started = {lo.unit: self.manager.start_unit(lo.unit) for lo in self.layouts}
        props = ("Id", "LoadState", "LoadError", "ActiveState", "Result", "FragmentPath", "DropInPaths")
        for _ in range(1000):  # every recorder has exited (Type=simple: `start` returns once it is forked)
            self.shown = self.manager.show_many(
                ["baseline.service", *(lo.unit for lo in self.layouts)], *props
            )
            if not any(
                s.get("ActiveState") in ("active", "activating", "deactivating") for s in self.shown.values()
            ):
                break
            time.sleep(0.02)
        baseline = record(self.manager.records, "baseline.service")
        assert baseline is not None, self.manager.log()
        self.manager_env = baseline[1]

    def theirs(self, layout: unitcorpus.Layout) -> dict:
        """What the manager did: ran (the argv and the unit's own environment) or did not (why)."""
        shown = self.shown[layout.unit]
        got = record(self.manager.records, shown.get("Id") or layout.unit)  # an alias runs as its target
        if got is None:
            return {
                "ran": False,
                "why": f"{shown.get('LoadState')}: {shown.get('LoadError') or shown.get('Result')}",
            }
        argv, env = got
        own = {k: v for k, v in env.items() if k not in SET_BY_SYSTEMD and self.manager_env.get(k) != v}
        files = [shown["FragmentPath"], *shown["DropInPaths"].split()]
        # DropInPaths lists a directory named *.conf too, which systemd reads nothing from
        read = [os.path.realpath(f) for f in files if f and not os.path.isdir(f)]
        return {"ran": True, "argv": argv, "env": own, "files": read}

    def ours(self, layout: unitcorpus.Layout) -> dict | None:
        root = self.roots[layout.root]
        config = TargetConfig(
            name="t",
            python=sys.executable,
            package="sglang",
            files={"unit": f"{root}/{unitcorpus.E}/{layout.unit}"},
            unit_path=self.unit_path,
        )
        return units.as_dict(units.on_target(LocalTarget(config)))


def judge(theirs: dict, ours: dict | None) -> tuple[str, str]:
    """'agree', 'not known' or 'WRONG', and why."""
    if ours is None:
        return "WRONG", "no reading at all"
    if not ours["known"]:
        return "not known", ours["why"]
    runs = bool(ours["source"]) and not ours["refused"]
    if not theirs["ran"]:
        if not runs:
            return "agree", f"does not run ({ours['refused'] or 'no ExecStart='})"
        return "WRONG", f"systemd ran nothing ({theirs['why']}); the reading says it runs {ours['argv']}"
    if not runs:
        return "WRONG", f"systemd ran {theirs['argv']}; the reading says it does not run ({ours['refused']})"
    if ours.get("problem"):
        return "not known", ours["problem"]
    if "@" in (
        ours.get("prefixes") or ""
    ):  # argv[0] of its own: a script's interpreter hides it, compare the rest
        if [ours["path"], *ours["argv"][1:]] != theirs["argv"]:
            return "WRONG", f"{ours['path']} with argv {ours['argv']} but systemd ran {theirs['argv']}"
    elif ours["argv"] != theirs["argv"]:
        return "WRONG", f"argv {ours['argv']} but systemd ran {theirs['argv']}"
    if ours.get("environment_known", True) and ours["environment"] != theirs["env"]:
        return "WRONG", f"environment {ours['environment']} but the process got {theirs['env']}"
    read = [os.path.realpath(f) for f in ours["files"]]
    if read != theirs["files"]:
        return "WRONG", f"files {ours['files']} but systemd read {theirs['files']}"
    for hidden in ours["masked"]:
        if os.path.realpath(hidden["path"]) == os.path.realpath(hidden["by"]):
            return "WRONG", f"{hidden['path']} is listed as masked by itself ({hidden['by']})"
    return "agree", "the same argv, environment and files"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    c = Corpus(tmp_path_factory.mktemp("corpus"))
    try:
        yield c
    finally:
        c.manager.stop()


def test_the_reading_never_contradicts_the_live_manager(corpus):
    verdicts = {lo.key: (lo.klass, *judge(corpus.theirs(lo), corpus.ours(lo))) for lo in corpus.layouts}
    counts = Counter(v[1] for v in verdicts.values())
    summary = {
        "layouts": len(verdicts),
        **counts,
        "not known": {k: v[2] for k, v in verdicts.items() if v[1] == "not known"},
        "wrong": {k: v[2] for k, v in verdicts.items() if v[1] == "WRONG"},
    }
    Path(os.environ.get("PK_CORPUS_REPORT", corpus.manager.home / "corpus.json")).write_text(
        json.dumps({"summary": summary, "verdicts": verdicts}, indent=1)
    )
    assert len(verdicts) >= 60
    assert counts["agree"] >= 0.75 * len(verdicts), summary  # a reading that never knows is no reading
    assert not summary["wrong"], json.dumps(summary, indent=1)
    assert all(why.strip() for why in summary["not known"].values())  # "not known" always says why


def test_the_manager_ran_the_corpus(corpus):
    """The comparison is worth something only if the manager really loaded and ran most layouts."""
    ran = [lo.key for lo in corpus.layouts if corpus.theirs(lo)["ran"]]
    assert len(ran) >= 40, corpus.manager.log()[-3000:]


def test_a_fifo_dropin_is_never_opened_while_systemd_blocks_on_it(tmp_path):
    """A FIFO named *.conf in a drop-in directory: systemd 252 opens it and waits for a writer, its whole
    manager with it; the reading says it cannot know, without opening it."""
    root = tmp_path / "root"
    path = below_root(root, SYSTEMD_UNIT_PATH)
    manager = LiveManager.start(tmp_path / "manager", list(path))
    try:
        layout = unitcorpus.fifo_layout(str(manager.recorder))
        manager.write(root, dict(unitcorpus.iter_files(layout, str(root))))
        manager.daemon_reload()
        argv = manager.systemctl_argv()
        argv.insert(argv.index("systemctl"), "SYSTEMD_BUS_TIMEOUT=3")  # sd-bus's method call timeout
        blocked = subprocess.run([*argv, "start", layout.unit], capture_output=True, text=True)
        assert blocked.returncode != 0 and "Connection timed out" in blocked.stderr, blocked.stderr
        fifo = root / unitcorpus.E / f"{layout.unit}.d" / "a.conf"
        os.close(
            os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        )  # ENXIO unless a reader holds it: systemd, waiting
        config = TargetConfig(
            name="t",
            python=sys.executable,
            package="sglang",
            files={"unit": str(root / unitcorpus.E / layout.unit)},
            unit_path=tuple(map(str, path)),
        )
        ours = units.as_dict(units.on_target(LocalTarget(config)))
        assert ours == {"known": False, "why": ours["why"]} and f"{fifo} is a FIFO" in ours["why"]
    finally:
        manager.stop()


STATUS_CASES = (
    "instance-dropins",
    "alias-dropin-on-real-name",
    "masked-by-dev-null",
    "minus-relative-path",
    "merged-usr-unit-and-dropin",
    "var-from-environment-file",
)


def test_status_json_says_what_the_live_manager_runs(corpus, env):
    """The same comparison through the command itself: `status --json` on a workspace whose target's unit
    and unit_path point into the corpus."""
    config = env.root / "patchkeeper.toml"
    original = config.read_text()
    unit_path = ", ".join(f'"{d}"' for d in corpus.unit_path)
    verdicts = {}
    for layout in (lo for lo in corpus.layouts if lo.key.split("-", 1)[1] in STATUS_CASES):
        unit = f"{corpus.roots[layout.root]}/{unitcorpus.E}/{layout.unit}"
        config.write_text(
            original.replace(f'unit = "{env.unit}"', f'unit = "{unit}"').replace(
                'package = "sglang"\n', f'package = "sglang"\nunit_path = [{unit_path}]\n', 1
            )
        )
        doc = json.loads(env.pk("status", "--json").stdout)["exec_start"]
        assert doc == corpus.ours(layout)
        verdicts[layout.key] = judge(corpus.theirs(layout), doc)
    assert len(verdicts) == len(STATUS_CASES)
    assert [v for v in verdicts.values() if v[0] == "WRONG"] == []
    assert sum(v[0] == "agree" for v in verdicts.values()) == len(STATUS_CASES) - 1, (
        verdicts
    )  # the env file: not known


def test_the_specifier_table_is_systemds(corpus):
    """Every letter after %: the ones the name resolves give systemd's value, the running system's ones run,
    the ones systemd does not know are refused (checks/specifiers.py)."""
    m, root = corpus.manager, corpus.roots["split"]
    letters = string.ascii_letters
    m.write(
        root,
        {
            f"{unitcorpus.UL}/pkspec-{c}-x@.service": f"[Service]\nExecStart={m.recorder} %{c}\n"
            for c in letters
        },
    )
    m.daemon_reload()
    names = {c: f"pkspec-{c}-x@in-st\\x2dq.service" for c in letters}
    for name in names.values():
        m.start_unit(name)
    outcome = {}
    for c, name in names.items():
        for _ in range(500):  # Type=simple: the recorder may still be running
            got = record(m.records, name)
            state = m.show(name, "ActiveState")["ActiveState"]
            if got is not None or state not in ("active", "activating"):
                break
            time.sleep(0.01)
        resolved = specifiers.resolve(f"%{c}", name)
        if resolved.bad:
            outcome[c] = got is None or f"ran {got[0][1:]}"
        elif resolved.unknown:
            outcome[c] = got is not None or "refused"
        else:
            outcome[c] = got is not None and got[0][1:] == [resolved.text] or f"{resolved.text!r} but {got}"
    assert {c: o for c, o in outcome.items() if o is not True} == {}
    assert len(specifiers.RUNNING_SYSTEM) + len(specifiers.FROM_NAME) - 1 + 11 == len(letters)  # 11 unknown
