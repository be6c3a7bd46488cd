"""The fast paths import what they need and no more: `python -X importtime` of status, audit, diff and
apply on a local target holds our modules and click, never paramiko, GitPython, packaging, thread
pools or http (each costs tens of milliseconds on every run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import edit_file

HEAVY = ("paramiko", "invoke", "git", "gitdb", "packaging", "concurrent", "multiprocessing", "http", "urllib.request",
         "ssl", "email", "logging")


def imported(env, *args: str, code: int = 0) -> set[str]:
    """Every module the CLI imports for `args`, as -X importtime lists them."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "patchkeeper", "--workspace", str(env.root),
                           *args], capture_output=True, text=True)
    assert proc.returncode == code, proc.stderr[-2000:]
    return {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def test_fast_paths_import_no_heavy_modules(env):
    for args in (["apply", "ddtree", "--no-verify"], ["status"], ["audit", "-q"], ["diff", "local"],
                 ["rollback", "--to", "baseline", "--no-verify"], ["audit", "-q"]):
        modules = imported(env, *args)
        assert {"patchkeeper.host.agent"} <= modules, args  # the probe sees imports
        assert heavy(modules) == [], args
    # a command that needs one of them does import it: the check above is not blind
    (env.root / "patchsets" / "ddtree" / "patchset.toml").write_text(
        (env.root / "patchsets" / "ddtree" / "patchset.toml").read_text().replace('"==0.5.23"', '">=0.5,<0.6"'))
    assert "packaging.specifiers" in imported(env, "check", "ddtree")


# what a verb does not need, beyond HEAVY: the service check and its HTTP probe (no [service] or --no-verify),
# adopting and repairing (a baseline is recorded already), git's diff values, and for rollback the patch sets
# (hashlib may load: the fingerprint checks other distributions' sha256 RECORD digests where its cache is cold)
NOT_NEEDED = ("patchkeeper.aftercheck", "patchkeeper.verify", "patchkeeper.service", "patchkeeper.host.probe_http", "socket", "patchkeeper.repair",
              "patchkeeper.diffwrite", "shutil", "subprocess", "urllib.parse")  # (pathlib's: a stand-in, see launch.py)
# nor, without click (which uses it), inspect: dataclasses imports it only to sign a class without a docstring
UNSIGNED = ("inspect", "ast", "dis")


def test_apply_and_rollback_load_only_their_own_modules(env):
    env.pk("snapshot", "--name", "start")  # the baseline: apply then records none (adopt's RECORD check stays out)
    apply = imported(env, "apply", "ddtree")  # no [service] in this workspace: nothing to verify
    rollback = imported(env, "rollback", "--to", "baseline")
    assert {"patchkeeper.commands.apply", "patchkeeper.patchset", "unidiff"} <= apply  # the probe sees imports
    assert [m for m in NOT_NEEDED + UNSIGNED if m in apply] == []
    assert {"patchkeeper.commands.rollback", "patchkeeper.repair"} <= rollback  # repair: files outside the package
    assert [m for m in NOT_NEEDED + UNSIGNED + ("patchkeeper.patchset", "patchkeeper.patching", "unidiff",
                                                 "patchkeeper.adopt") if m in rollback and m != "patchkeeper.repair"] == []
    status = imported(env, "status")
    assert "patchkeeper.commands.status" in status
    assert [m for m in NOT_NEEDED + ("patchkeeper.patchset", "unidiff", "patchkeeper.changes") if m in status] == []
    # a verb that verifies does load the service check: the lists above are not blind
    assert {"patchkeeper.verify", "patchkeeper.service"} <= imported(env, "verify", code=2)


def test_plain_audit_runs_without_click_and_says_what_click_says(env):
    """`audit` in its plain forms is parsed by launch.py, not click: same report, same exit code;
    any other form (an option spelled with `=`, --probe, --help) is still click's."""
    modules = imported(env, "audit", "-q")
    assert "click" not in modules and "patchkeeper.cli" not in modules
    assert {"patchkeeper.host.agent", "patchkeeper.commands.audit"} <= modules  # the probe sees imports
    edit_file(env.site / "sglang" / "version.py", b"__version__ = 'edited'\n")  # drift: exit 1
    plain = env.pk("audit", "-q", "-v", "-t", "local", check=1)
    proc = subprocess.run([sys.executable, "-m", "patchkeeper", f"--workspace={env.root}", "audit", "--quiet",
                           "--verbose", "--target=local"], capture_output=True, text=True)
    assert (proc.returncode, proc.stdout, proc.stderr) == (plain.returncode, plain.stdout, plain.stderr)
    assert "sglang/version.py" in plain.stdout
    every = imported(env, "audit", "--all", code=1)  # --all too, and it says what click says
    assert "click" not in every and "patchkeeper.commands.fleet" in every
    plain = env.pk("audit", "--all", check=1)
    proc = subprocess.run([sys.executable, "-m", "patchkeeper", f"--workspace={env.root}", "audit", "--all"],
                          capture_output=True, text=True)
    assert (proc.returncode, proc.stdout, proc.stderr) == (plain.returncode, plain.stdout, plain.stderr)
    assert "click" in imported(env, "audit", "--all", "--probe", "sglang", code=1)  # --probe is click's
    bad = env.pk("audit", "-t", "nowhere", check=2)  # errors end as in click's path: one line and a hint
    assert bad.stderr.startswith("patchkeeper: error: unknown target 'nowhere'") and "hint:" in bad.stderr
    assert "Usage:" in env.pk("audit", "-q", "-x", check=2).stderr  # an unknown option: click explains


_COLLECTIONS = '''
import atexit, gc, sys
from patchkeeper import launch
counted = []
gc.callbacks.append(lambda phase, info: phase == "start" and counted.append(info["generation"]))
atexit.register(lambda: print(len(counted), gc.isenabled(), file=sys.stderr))  # (the command leaves after them)
sys.argv = ["patchkeeper", "--workspace", sys.argv[1], *sys.argv[2:]]
launch.main()
'''


def test_a_command_runs_no_collection(env):
    """launch.main turns the cyclic collector off while a command runs: a rollback of sglang built
    hundreds of thousands of tuples (stat caches, manifests), none in a cycle, and went over them in
    about 80 collections; none now, from the first import of the verb on."""
    env.pk("snapshot", "--name", "start")
    for args in (["apply", "ddtree", "--no-verify"], ["rollback", "--to", "baseline", "--no-verify"], ["status"]):
        proc = subprocess.run([sys.executable, "-c", _COLLECTIONS, str(env.root), *args], capture_output=True, text=True)
        assert proc.returncode == 0 and proc.stderr.split()[-2:] == ["0", "False"], (args, proc.stderr[-2000:])


def test_a_check_that_waits_on_a_service_collects_again(monkeypatch):
    """verify.run_checks may wait on a service for minutes: the collector is back on there."""
    import gc

    from patchkeeper import verify

    seen = []

    def restart(target, svc):
        seen.append(gc.isenabled())
        raise KeyboardInterrupt

    monkeypatch.setattr(verify, "restart", restart)
    was = gc.isenabled()
    gc.disable()
    try:
        try:
            verify.run_checks(None, None, with_restart=True)  # type: ignore[arg-type]
        except KeyboardInterrupt:
            pass
    finally:
        gc.enable() if was else gc.disable()
    assert seen == [True]


def test_a_plain_audit_leaves_without_teardown_once_its_exit_handlers_ran(env, tmp_path):
    """launch.py ends a plain audit by verb.leave: the exit handlers run (classcache.py writes its
    table of compiled dataclass methods at exit) and the output is whole, then the process exits
    with the audit's code without freeing its objects one by one; while another thread runs, it
    ends as sys.exit does, waiting for that thread."""
    from patchkeeper import classcache

    table = tmp_path / "cache" / "patchkeeper" / Path(classcache.path()).name
    run = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pk("snapshot", "--name", "s0")
    edit_file(env.site / "sglang" / "version.py", b"__version__ = 'edited'\n")
    plain = env.pk("audit", "-v", check=1, env=run)
    assert table.exists()  # written by the exit handler
    assert "sglang/version.py" in plain.stdout
    assert plain.stdout.splitlines()[-1].endswith("has 1 file(s) changed outside patchkeeper; environment clean")
    script = ("import atexit, os, sys, threading, time\n"
              "from patchkeeper.verb import leave\n"
              "atexit.register(lambda: open(sys.argv[1], 'a').write('handler\\n'))\n"
              "if sys.argv[2] == 'thread':\n"
              "    threading.Thread(target=lambda: (time.sleep(0.2), open(sys.argv[1], 'a').write('thread\\n'))).start()\n"
              "sys.stdout.write('buffered, not flushed')\n"
              "leave(5)\n")
    for mode, lines in (("alone", ["handler"]), ("thread", ["thread", "handler"])):
        log = tmp_path / f"{mode}.log"
        proc = subprocess.run([sys.executable, "-c", script, str(log), mode], capture_output=True, text=True)
        assert (proc.returncode, proc.stdout, log.read_text().split()) == (5, "buffered, not flushed", lines)


_TEARDOWN = """
import os, sys
from patchkeeper import launch

class Marker:
    def __del__(self, write=os.write, fd=os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND)):
        write(fd, b"torn down;")  # (names bound now: a teardown may have cleared the module's)

marker = Marker()  # freed only by the interpreter's teardown
sys.argv = ["patchkeeper", "--workspace", *sys.argv[2:]]
launch.main()
"""


def test_every_command_leaves_without_teardown(env, tmp_path):
    """launch.main ends apply, rollback and the verbs click parses by verb.leave: their output whole
    and their exit code kept, and no teardown after them (a rollback of sglang still holds its stat
    caches and manifests: freeing them one by one cost 40-60 ms)."""
    env.pk("snapshot", "--name", "start")
    log = tmp_path / "teardown.log"
    for args, code in ((["apply", "ddtree", "--no-verify"], 0), (["rollback", "--to", "baseline", "--no-verify"], 0),
                       (["status"], 0), (["rollback", "--to", "no-such-state"], 2)):
        proc = subprocess.run([sys.executable, "-c", _TEARDOWN, str(log), str(env.root), *args], capture_output=True,
                              text=True)
        assert proc.returncode == code, (args, proc.stderr[-2000:])
        assert not log.exists() or log.read_text() == "", args
    assert "state" in proc.stderr or "no-such-state" in proc.stderr  # the error said, whole
    proc = subprocess.run([sys.executable, "-c", _TEARDOWN.replace("launch.main()", "sys.exit(0)"), str(log),
                           str(env.root)], capture_output=True, text=True)
    assert log.read_text() == "torn down;"  # the probe sees a teardown where there is one
    profiled = _TEARDOWN.replace("launch.main()", "sys.setprofile(lambda *a: None)\nlaunch.main()")
    proc = subprocess.run([sys.executable, "-c", profiled, str(log), str(env.root), "status"], capture_output=True,
                          text=True)
    assert proc.returncode == 0 and log.read_text() == "torn down;" * 2  # a profiler reports after the program
