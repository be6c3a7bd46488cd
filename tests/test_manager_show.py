"""checks/manager.py against a live systemd 252 manager: `systemctl show` as systemd prints it (argv joined
with spaces, a literal `;`, a newline in an argument, quoted Environment= and DropInPaths, $VAR), parsed
and checked against what the main process really runs (/proc), and said "not known" where it cannot be."""

from __future__ import annotations

import os
import sys

import pytest
from livesystemd import LiveManager

from patchkeeper.checks import manager, units
from patchkeeper.targets.local import LocalTarget
from patchkeeper.workspace import TargetConfig

SLEEPER = f"{sys.executable} -c 'import sys, time; time.sleep(3600)'"


class InsideTarget(LocalTarget):
    """This machine, with every command run inside the live manager's namespaces (as on its host)."""

    def __init__(self, config: TargetConfig, m: LiveManager) -> None:
        super().__init__(config)
        self.m = m

    @property
    def agent(self):  # type: ignore[no-untyped-def]
        return _InsideAgent(self)

    def run(self, argv, timeout=60.0, input=None):  # type: ignore[no-untyped-def]
        inside = ["nsenter", "-t", str(self.m.init), "-p", "-m", "env", f"XDG_RUNTIME_DIR={self.m.runtime}"]
        return super().run(inside + list(argv), timeout, input)


class _InsideAgent:
    """The one agent call manager.ask makes (is /run/systemd/system there?), answered inside."""

    def __init__(self, target: InsideTarget) -> None:
        self.target = target

    def lstat(self, path: str) -> object | None:
        code, _, _ = self.target.run(["sh", "-c", 'test -e "$1" || test -L "$1"', "sh", path])
        return True if code == 0 else None


def target_for(m: LiveManager, unit: str, scope: str = "user") -> InsideTarget:
    config = TargetConfig(
        name="inside", python=sys.executable, package="sglang", files={"unit": unit}, systemd=scope
    )
    return InsideTarget(config, m)


# (the unit's [Service] lines, the argv the process gets; None: the manager cannot tell it exactly)
CASES = {
    "spaces.service": ("ExecStart=SLEEPER 'a b' \"c  d\" e", ["a b", "c  d", "e"]),
    "semicolon.service": (
        "ExecStart=SLEEPER \\; 'p ; argv[]=q ; ignore_errors=no' x",
        [";", "p ; argv[]=q ; ignore_errors=no", "x"],
    ),
    "newline.service": ('ExecStart=SLEEPER "x\\ny" "tab\\there"', ["x\ny", "tab\there"]),
    "dollar.service": (
        'Environment="A=one two" B=b\nExecStart=SLEEPER $A ${B}x "${A}" $$B',
        ["one", "two", "bx", "one two", "$B"],
    ),
    "envfile.service": ("EnvironmentFile=ENVFILE\nExecStart=SLEEPER $FROMFILE", ["from", "file"]),
    "override.service": (
        "Environment=V=fromunit\nEnvironmentFile=ENVFILE\nExecStart=SLEEPER $V",
        ["fromfile"],
    ),
    "quoted-env.service": ('Environment="Q=a\\nb" \'R=$x\' S= "T=\\"q\\""\nExecStart=SLEEPER', []),
}


@pytest.fixture
def started(live_systemd, tmp_path):
    m = live_systemd
    root = m.root
    assert root is not None
    envfile = tmp_path / "env"
    envfile.write_text("FROMFILE=from file\nV=fromfile\n")
    files = {}
    for name, (service, _) in CASES.items():
        text = service.replace("SLEEPER", SLEEPER).replace("ENVFILE", str(envfile))
        files[f"etc/systemd/system/{name}"] = f"[Service]\n{text}\n"
    files["etc/systemd/system/spaces.service.d/a drop-in.conf"] = "[Service]\nEnvironment=D=1\n"
    m.write(root, files)
    m.daemon_reload()
    done = m.start_unit(*CASES)
    assert done.returncode == 0, (done.stderr, m.log())
    return m


def test_what_systemctl_show_says_is_parsed_and_checked_against_the_process(started):
    m = started
    root = m.root
    for name, (_, args) in CASES.items():
        path = f"{root}/etc/systemd/system/{name}"
        view = manager.ask(target_for(m, path))
        assert isinstance(view, manager.ManagerView), (name, view)
        assert view.load_state == "loaded" and view.active_state == "active" and view.main_pid > 1
        assert view.fragment == path and len(view.commands) == 1 and not view.need_reload
        want = [sys.executable, "-c", "import sys, time; time.sleep(3600)", *args]
        assert list(view.argv or ()) == want, name  # /proc, inside the namespace
        assert view.command is not None and view.command.path == sys.executable
        stored = {  # systemd's argv before $VAR expansion, joined with spaces: what systemctl shows
            "dollar.service": " ".join(want[:3]) + " $A ${B}x ${A} $$B",
            "envfile.service": " ".join(want[:3]) + " $FROMFILE",
            "override.service": " ".join(want[:3]) + " $V",
        }.get(name, " ".join(want))
        assert view.command.argv_text == stored, name
        if name == "dollar.service":
            assert view.expected_text() == (" ".join(want), None)
        same, said = view.runs_loaded()
        taken = manager.as_command(view)
        assert isinstance(taken, units.Command) and list(taken.argv) == want
        if name == "envfile.service":  # $FROMFILE comes from a file the manager does not show
            assert same is None and "$FROMFILE not set by the unit's Environment=" in said
            assert view.environment_files == ((str(m.records.parent.parent / "env"), False),)
            assert manager.owed(view) == []  # not known is not a debt
        elif name == "override.service":  # Environment= says V=fromunit; the file, read later, wins
            assert same is None and "an EnvironmentFile= (" in said and manager.owed(view) == []
        else:
            assert same is True, (name, said)
        env_ok, env_said = view.environment_loaded()
        if name == "override.service":
            assert env_ok is None and "V=fromunit not in the process's environment" in env_said
        else:
            assert env_ok is True, (name, env_said)


def test_lists_come_back_word_for_word(started):
    m = started
    view = manager.ask(target_for(m, f"{m.root}/etc/systemd/system/quoted-env.service"))
    assert isinstance(view, manager.ManagerView)
    assert view.environment == ("Q=a\nb", "R=$x", "S=", 'T="q"')
    assert set(view.environment) <= set(view.environ or ())  # the process has them, byte for byte
    spaced = manager.ask(target_for(m, f"{m.root}/etc/systemd/system/spaces.service"))
    assert isinstance(spaced, manager.ManagerView)
    assert spaced.dropins == (f"{m.root}/etc/systemd/system/spaces.service.d/a drop-in.conf",)


def test_a_unit_the_manager_does_not_have_and_a_host_without_a_manager(started, tmp_path):
    m = started
    view = manager.ask(target_for(m, f"{m.root}/etc/systemd/system/absent.service"))
    assert isinstance(view, manager.ManagerView) and view.load_state == "not-found"
    assert manager.as_command(view) == (
        'systemd has no such unit loaded (not-found: org.freedesktop.systemd1.NoSuchUnit "Unit absent.service '
        'not found.")'
    )
    masked = m.root / "etc/systemd/system/masked.service"
    masked.symlink_to("/dev/null")
    m.daemon_reload()
    view = manager.ask(target_for(m, str(masked)))
    assert isinstance(view, manager.ManagerView) and view.load_state == "masked" and not view.commands
    # outside the namespace this machine has no /run/systemd/system: nothing is asked, and that is said
    outside = LocalTarget(target_for(m, str(masked)).config)
    assert (
        manager.ask(outside)
        == "systemd is not the running init on the target (/run/systemd/system is absent)"
    )
    off = LocalTarget(target_for(m, str(masked), scope="off").config)
    assert manager.ask(off) is None
    # the system manager's scope inside the namespace: no system bus there, so it does not answer, said
    system = manager.ask(target_for(m, str(masked), scope="system"))
    assert isinstance(system, str) and system.startswith("`systemctl show masked.service` did not answer: ")
    assert os.path.isdir("/run/systemd/system") is False
