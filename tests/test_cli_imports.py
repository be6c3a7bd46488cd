"""The CLI imports heavy libraries only where a command needs them: `python -X importtime` of status, audit,
diff and apply on a local target never loads paramiko, GitPython, packaging or http (each costs tens of
milliseconds on every run); and each verb's own modules only when that verb runs (cli.py's VERBS)."""

from __future__ import annotations

import click
from helpers import heavy, imported, loaded

from patchkeeper import cli


def test_fast_paths_import_no_heavy_modules(env):
    for args in (
        ["apply", "ddtree", "--no-verify"],
        ["status"],
        ["audit", "-q"],
        ["diff", "local"],
        ["rollback", "--to", "baseline", "--no-verify"],
        ["audit", "-q"],
    ):
        modules = imported(env, *args)
        assert {"patchkeeper.host.agent"} <= modules, args  # the probe sees imports
        assert heavy(modules) == [], args
    # a command that needs one of them does import it: the check above is not blind
    (env.root / "patchsets" / "ddtree" / "patchset.toml").write_text(
        (env.root / "patchsets" / "ddtree" / "patchset.toml")
        .read_text()
        .replace('"==0.5.23"', '">=0.5,<0.6"')
    )
    assert "packaging.specifiers" in imported(env, "check", "ddtree")


# What only other verbs use: the change engine, a rollout, repair and port, downloads, authoring.
OTHERS_ONLY = {
    "patchkeeper.change.engine",
    "patchkeeper.change.changes",
    "patchkeeper.change.rollout",
    "patchkeeper.change.repair",
    "patchkeeper.change.adopt",
    "patchkeeper.change.verify",
    "patchkeeper.checks.download",
    "patchkeeper.checks.wheels",
    "patchkeeper.patchset.port",
    "patchkeeper.patchset.merge3",
    "patchkeeper.patchset.authoring",
    "patchkeeper.patchset.exchange",
}


def own(modules: set[str]) -> set[str]:
    return {m for m in modules if m == "patchkeeper" or m.startswith("patchkeeper.")}


def verbs_of(modules: set[str]) -> set[str]:
    return {m for m in modules if m.startswith(("patchkeeper.verbs.", "patchkeeper.commands."))}


def test_each_verb_loads_its_own_module_only(env):
    """cli.py loads a verb's module when that verb runs: --help imports the group alone, status and
    audit their own verb and command modules and what these import, never another verb's."""
    # the group, the errors it maps to exit codes and JSON documents (errors.error_document), and
    # printable, which escapes what an error says (cli.say: a usage error is said as every error)
    assert own(loaded(env, "--help")[0]) == {
        "patchkeeper",
        "patchkeeper.cli",
        "patchkeeper.errors",
        "patchkeeper.host",
        "patchkeeper.host.errors",
        "patchkeeper.printable",
    }
    for verb, args in (("status", ["status"]), ("audit", ["audit", "-q"])):
        modules = own(loaded(env, *args)[0])
        assert verbs_of(modules) == {f"patchkeeper.verbs.{verb}", f"patchkeeper.commands.{verb}"}, verb
        assert modules & OTHERS_ONLY == set(), verb
    # the probe is not blind: apply loads the engine, and --help of a verb loads that verb only
    modules = own(loaded(env, "apply", "ddtree", "--no-verify")[0])
    assert {"patchkeeper.change.engine", "patchkeeper.change.changes"} <= modules & OTHERS_ONLY
    assert "patchkeeper.verbs.apply" in modules
    assert verbs_of(own(loaded(env, "diff", "--help")[0])) == {
        "patchkeeper.verbs.diff",
        "patchkeeper.commands.diff",
        "patchkeeper.commands.env",  # diff --env
    }


# What a warm audit of a local target with no patch set applied does not use (issue 40): the patch sets'
# reader, the SSH client and the wire to another interpreter, the fleet runner of --all.
UNPATCHED_AUDIT_SKIPS = {
    "patchkeeper.patchset.patchset",
    "patchkeeper.patchset.patching",
    "patchkeeper.patchset.gitdiff",
    "patchkeeper.patchset.templates",
    "patchkeeper.change.stacks",
    "patchkeeper.targets.ssh",
    "patchkeeper.targets.remote_agent",
    "patchkeeper.targets.fleet",
    "patchkeeper.commands.audit_all",
    "multiprocessing",
    "concurrent.futures",
    "importlib.resources",
}


def test_audit_of_an_unpatched_target_loads_no_patch_reader_ssh_or_fleet(baselined):
    env = baselined
    env.pk("snapshot", "--name", "start", "--manifest-only")
    modules, _ = loaded(env, "audit", "-q")
    assert {"patchkeeper.host.agent", "patchkeeper.host.treecheck"} <= modules  # the probe sees the audit
    assert modules & UNPATCHED_AUDIT_SKIPS == set()
    # the probe is not blind: --all loads the fleet runner, a patched target the patch sets' reader
    assert {"patchkeeper.commands.audit_all", "patchkeeper.targets.fleet"} <= loaded(
        env, "audit", "-q", "--all", code=None
    )[0]
    env.pk("apply", "ddtree", "--no-verify")
    modules, _ = loaded(env, "audit", "-q", code=None)
    assert {"patchkeeper.patchset.patchset", "patchkeeper.change.stacks"} <= modules
    assert modules & {"patchkeeper.targets.ssh", "patchkeeper.targets.fleet"} == set()


def test_the_listing_and_completion_of_verbs_are_those_of_the_loaded_commands(env):
    """--help lists every verb with the first sentence of its own docstring, whole, at every width; completing a verb name offers the same, loading no verb."""
    listed = {name: cli.summary(cmd) for name, cmd in cli.commands().items()}
    assert listed == {name: line for name, (_, line) in cli.VERBS.items()}
    for width in (50, 80, 120):  # every line whole at every width: wrapped, never cut with "..."
        ours = click.HelpFormatter(width=width)
        cli.main.format_commands(click.Context(cli.main), ours)
        flat = "".join(ours.getvalue().split())  # wrapped at spaces and after hyphens
        assert "..." not in flat and all(
            "".join(f"{n}{line}".split()) in flat for n, line in listed.items()
        ), width
    modules, text = loaded(env, "--help")
    assert all(f"  {name} " in text for name in cli.VERBS) and verbs_of(modules) == set()

    for words, offered, verbs in (
        ("s", ["show", "show-backup", "snapshot", "status"], set()),
        ("apply d", ["ddtree", "dflash"], {"patchkeeper.verbs.apply", "patchkeeper.verbs.rollouts"}),
    ):
        completing = {
            "_PATCHKEEPER_COMPLETE": "bash_complete",
            "COMP_WORDS": f"patchkeeper {words}",
            "COMP_CWORD": str(len(words.split())),
        }
        modules, out = loaded(env, environ=completing)
        assert [line.split(",", 1)[1] for line in out.splitlines()] == offered, words
        assert {m for m in modules if m.startswith("patchkeeper.verbs.")} == verbs, words
