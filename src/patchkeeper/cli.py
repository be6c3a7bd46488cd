"""The command line (click, here and in options.py): the verbs, each run by options.command."""

from __future__ import annotations

import os
from pathlib import Path
from typing import cast

import click

from .change.adopt import check_mode
from .change.rollout import Noted
from .commands import record as record_verb
from .commands import status as status_verb
from .commands import verify as verify_verb
from .commands.apply import apply as run_apply
from .commands.audit import audit as run_audit
from .commands.check import check as run_check
from .commands.clear_caches import clear_caches as run_clear_caches
from .commands.diff import diff as run_diff
from .commands.diff import diff_all
from .commands.disconnect import disconnect as run_disconnect
from .commands.env import diff_env
from .commands.env import env as run_env
from .commands.export import export as run_export
from .commands.import_patch import import_patch
from .commands.init import init as run_init
from .commands.list import list_patchsets
from .commands.log import log as run_log
from .commands.log import log_all as run_log_all
from .commands.port import port as run_port
from .commands.recover import recover as run_recover
from .commands.repair import repair_dist
from .commands.rollback import rollback as run_rollback
from .commands.show import show as run_show
from .commands.show_backup import show_backup as run_show_backup
from .commands.snapshot import snapshot as run_snapshot
from .completion import complete_patchsets, complete_states, complete_targets
from .mcpserver import server as mcp_server
from .options import (
    Verbs,
    adopt_options,
    change,
    change_options,
    chosen,
    command,
    group_option,
    json_option,
    target_option,
    targets_option,
    workspace_of,
)
from .workspace import Workspace


@click.group(cls=Verbs, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--workspace",
    "-w",
    metavar="DIR",
    help="workspace directory (default: $PATCHKEEPER_WORKSPACE, else the current directory and its parents)",
)
@click.option(
    "--inventory",
    "-i",
    metavar="FILE",
    help="take targets and groups from this Ansible inventory (default: inventory = ... in patchkeeper.toml)",
)
@click.version_option(package_name="patchkeeper")
@click.pass_context
def main(ctx: click.Context, workspace: str | None, inventory: str | None) -> None:
    """Versioned patch sets over an installed Python package: apply atomically, roll back exactly."""
    ctx.obj = {"workspace": workspace, "inventory": os.path.abspath(inventory) if inventory else None}


@main.command()
@click.option("--python", metavar="VENV/bin/python", help="the interpreter of the first target, `local`")
@click.option("--package", default="sglang", show_default=True, help="the distribution patch sets change")
@json_option
@click.pass_context
@command
def init(ctx: click.Context, python: str | None, package: str, as_json: bool) -> int:
    """Start a workspace here (or in -w DIR): patchkeeper.toml, the shipped patch sets, snapshots/."""
    return run_init(Path(ctx.obj.get("workspace") or ".").resolve(), python, package, as_json=as_json)


@main.command("list")
@json_option
@click.pass_context
@command
def list_cmd(ctx: click.Context, as_json: bool) -> int:
    """Patch sets, versions, and which package version each fits."""
    return list_patchsets(workspace_of(ctx), as_json)


@main.command()
@click.argument("name", shell_complete=complete_patchsets)
@change_options
@click.option(
    "--force", is_flag=True, help="apply over hand edits (backed up first) or another package version"
)
@adopt_options
@json_option
@click.pass_context
@command
def apply(
    ctx: click.Context,
    name: str,
    targets_: tuple[str, ...],
    group: str | None,
    every: bool,
    serial: int | None,
    max_fail: int,
    dry_run: bool,
    no_verify: bool,
    force: bool,
    restore_pristine: bool,
    accept_edits: bool,
    as_json: bool,
) -> int:
    """Apply patch set NAME (switching within its group) in one transaction.

    With a [service] table the service is then restarted and verified by a real generation;
    if that fails the previous state is put back (exit 3). On several targets (-t A -t B, -g, --all)
    they are changed --serial at a time, one line each; exit code: the worst of theirs.
    """

    adopt = check_mode(restore_pristine, accept_edits)

    def one(ws: Workspace, target: str | None, noted: Noted | None, json_doc: bool) -> int:
        return run_apply(
            ws, target, name, dry_run, force, verify=not no_verify, adopt=adopt, as_json=json_doc, noted=noted
        )

    return change(
        ctx, one, f"apply {name}", targets_, group, every, serial, max_fail, dry_run, not no_verify, as_json
    )


@main.command()
@change_options
@click.option(
    "--to",
    "to",
    required=True,
    metavar="STATE",
    shell_complete=complete_states,
    help="baseline | previous | a state name | a state id | a transaction id",
)
@json_option
@click.pass_context
@command
def rollback(
    ctx: click.Context,
    targets_: tuple[str, ...],
    group: str | None,
    every: bool,
    serial: int | None,
    max_fail: int,
    dry_run: bool,
    no_verify: bool,
    to: str,
    as_json: bool,
) -> int:
    """Give every managed file the exact bytes and mode of STATE (on several targets: as apply does)."""

    def one(ws: Workspace, target: str | None, noted: Noted | None, json_doc: bool) -> int:
        return run_rollback(ws, target, to, dry_run, verify=not no_verify, as_json=json_doc, noted=noted)

    return change(
        ctx,
        one,
        f"rollback --to {to}",
        targets_,
        group,
        every,
        serial,
        max_fail,
        dry_run,
        not no_verify,
        as_json,
    )


@main.command()
@targets_option
@group_option
@json_option
@click.option("--all", "every", is_flag=True, help="every target in the workspace, concurrently, one table")
@click.pass_context
@command
def status(
    ctx: click.Context, targets_: tuple[str, ...], group: str | None, as_json: bool, every: bool
) -> int:
    """The applied stack, and whether the files still match the recorded state (without -t, of the
    default target; with no default_target and several targets, of them all, as --all)."""
    picked = chosen(ctx, targets_, group, every)
    if picked is not None:
        return status_verb.status_all(picked, as_json)
    ws = workspace_of(ctx)
    if not targets_ and ws.default_target is None and len(ws.targets) > 1:
        return status_verb.status_all(ws, as_json)
    return status_verb.status(ws, targets_[0] if targets_ else None, as_json)


@main.command()
@targets_option
@group_option
@json_option
@click.option("--all", "every", is_flag=True, help="every target in the workspace, merged, newest first")
@click.pass_context
@command
def log(ctx: click.Context, targets_: tuple[str, ...], group: str | None, as_json: bool, every: bool) -> int:
    """Every transaction on the target, newest first, with its origin (the CLI or an Ansible task)."""
    picked = chosen(ctx, targets_, group, every)
    if picked is not None:
        return run_log_all(picked, as_json)
    return run_log(workspace_of(ctx), targets_[0] if targets_ else None, as_json)


@main.command()
@target_option
@click.option("--name", required=True, help="the state's name, for rollback --to NAME")
@click.option("--manifest-only", is_flag=True, help="record digests only, not the bytes")
@click.option("--dry-run", "-n", is_flag=True, help="say what would be recorded; change nothing")
@adopt_options
@json_option
@click.pass_context
@command
def snapshot(
    ctx: click.Context,
    target: str | None,
    name: str,
    manifest_only: bool,
    dry_run: bool,
    restore_pristine: bool,
    accept_edits: bool,
    as_json: bool,
) -> int:
    """Record the target's files as a named state."""
    return run_snapshot(
        workspace_of(ctx),
        target,
        name,
        manifest_only,
        adopt=check_mode(restore_pristine, accept_edits),
        dry_run=dry_run,
        as_json=as_json,
    )


@main.command()
@click.argument("dist")
@target_option
@click.option(
    "--wheel",
    metavar="FILE.whl",
    help="the release wheel (default: the workspace's wheels directory, "
    "else pip download for the target's interpreter)",
)
@click.option("--dry-run", "-n", is_flag=True, help="print what would be restored; change nothing")
@click.option("--no-verify", is_flag=True, help="do not restart and verify the target's [service] afterwards")
@adopt_options
@json_option
@click.pass_context
@command
def repair(
    ctx: click.Context,
    dist: str,
    target: str | None,
    wheel: str | None,
    dry_run: bool,
    no_verify: bool,
    restore_pristine: bool,
    accept_edits: bool,
    as_json: bool,
) -> int:
    """Give the files of installed distribution DIST that differ from its RECORD their release bytes back.

    One transaction (backups in the store, a ledger entry of kind repair): `rollback --to previous`
    undoes it. With a [service] table the service is then restarted and verified (--no-verify skips).
    Exit 0 when all were restored (and it verifies), 1 when some are left (named) or it fails
    verification, 2 when no wheel matches.
    """

    return repair_dist(
        workspace_of(ctx),
        target,
        dist,
        wheel,
        dry_run,
        adopt=check_mode(restore_pristine, accept_edits),
        verify=not no_verify,
        as_json=as_json,
    )


@main.command("show-backup")
@click.argument("digest")
@target_option
@json_option
@click.pass_context
@command
def show_backup(ctx: click.Context, digest: str, target: str | None, as_json: bool) -> int:
    """Print the bytes of a backed-up file (a hand edit a change replaced), verified: DIGEST as
    rollback and log show it, or 8+ of its hex digits. `patchkeeper show-backup D > FILE`."""

    return run_show_backup(workspace_of(ctx), target, digest, as_json)


@main.command()
@target_option
@json_option
@click.pass_context
@command
def recover(ctx: click.Context, target: str | None, as_json: bool) -> int:
    """Finish or undo a transaction that was interrupted (any command does this first)."""
    return run_recover(workspace_of(ctx), target, as_json)


@main.command()
@targets_option
@group_option
@click.option(
    "--probe",
    "probes",
    multiple=True,
    metavar="MODULE",
    help="import MODULE in the target's interpreter (a separate process); repeatable",
)
@click.option("--all", "every", is_flag=True, help="every target in the workspace, concurrently, one table")
@json_option
@click.option("-v", "--verbose", is_flag=True, help="also list the files the applied patch sets changed")
@click.option("--quiet", "-q", is_flag=True, help="no progress bar")
@click.option(
    "--wait",
    type=click.FloatRange(min=0),
    metavar="SECONDS",
    help="how long to wait for a change under way on the target to end (default 5)",
)
@click.option("--rehash", is_flag=True, help="ignore every cache and seal: read and hash every file again")
@click.pass_context
@command
def audit(
    ctx: click.Context,
    targets_: tuple[str, ...],
    group: str | None,
    probes: tuple[str, ...],
    every: bool,
    as_json: bool,
    verbose: bool,
    quiet: bool,
    wait: float | None,
    rehash: bool,
) -> int:
    """What differs in the target's site-packages, and why: patched, drift, environment, bytecode, probe."""
    picked = chosen(ctx, targets_, group, every)
    if picked is not None:
        return run_audit(picked, None, list(probes), True, as_json, verbose, quiet, wait, rehash)
    return run_audit(
        workspace_of(ctx),
        targets_[0] if targets_ else None,
        list(probes),
        False,
        as_json,
        verbose,
        quiet,
        wait,
        rehash,
    )


@main.command()
@target_option
@click.option("--all", "every", is_flag=True, help="every held connection of this user")
@json_option
@click.pass_context
@command
def disconnect(ctx: click.Context, target: str | None, every: bool, as_json: bool) -> int:
    """End the held SSH connection of a target (or --all), before its `persist` seconds run out."""
    return run_disconnect(None if every else workspace_of(ctx), target, every, as_json)


@main.command("clear-caches")
@targets_option
@group_option
@click.option("--all", "every", is_flag=True, help="every target in the workspace")
@json_option
@click.pass_context
@command
def clear_caches(
    ctx: click.Context, targets_: tuple[str, ...], group: str | None, every: bool, as_json: bool
) -> int:
    """Delete every cache kept for the target (or -t A -t B, -g, --all) and your user cache.

    Caches only save time (docs/files-and-caches.md): records are kept, and the next command that
    needs a cache writes it again. `audit --rehash` reads none of them without deleting them.
    """
    return run_clear_caches(workspace_of(ctx), targets_, group, every, as_json)


# ---- authoring: record, import, export, check, show --------------------------------------------
bump_option = click.option(
    "--bump",
    type=click.Choice(["major", "minor", "patch"]),
    help="raise the version of an existing patch set whose content changes",
)


@main.command()
@click.argument("name")
@target_option
@click.option(
    "--from",
    "since",
    metavar="STATE",
    shell_complete=complete_states,
    help="record the target's edits since this state",
)
@click.option(
    "--from-adoption",
    "adoption",
    is_flag=True,
    help="record the hand edits found when the target was adopted (its first baseline), against the release",
)
@click.option("--git", "checkout", metavar="DIR", help="record from a git checkout of the package's source")
@click.option("--range", "span", metavar="A..B", help="with --git: the refs to diff")
@click.option(
    "--subdir", default="", metavar="DIR", help="with --git: the directory holding the package (python)"
)
@bump_option
@click.option("-m", "--description", help="the patch set's description")
@click.option("--package", help="with --git: the package it is for (default: the default target's)")
@click.option("--package-version", metavar="SPEC", help="with --git: PEP 440 specifier of fitting versions")
@json_option
@click.pass_context
@command
def record(
    ctx: click.Context,
    name: str,
    target: str | None,
    since: str | None,
    adoption: bool,
    checkout: str | None,
    span: str | None,
    subdir: str,
    bump: str | None,
    description: str | None,
    package: str | None,
    package_version: str | None,
    as_json: bool,
) -> int:
    """Write patch set NAME from a target's edits since a state, the hand edits found when it was
    adopted, or a git range."""

    if sum(map(bool, (since, adoption, checkout))) != 1:
        raise click.UsageError(
            "give either -t T --from STATE, -t T --from-adoption, or --git DIR --range A..B"
        )
    if adoption:
        return record_verb.record_adoption(
            workspace_of(ctx), target, name, bump, description, as_json=as_json
        )
    if checkout:
        if not span:
            raise click.UsageError("--git needs --range A..B")
        return record_verb.record_git(
            workspace_of(ctx),
            name,
            checkout,
            span,
            subdir,
            bump,
            description,
            package,
            package_version,
            as_json=as_json,
        )
    # exactly one of the three is given: here, --from STATE
    return record_verb.record_target(
        workspace_of(ctx), target, name, cast(str, since), bump, description, as_json=as_json
    )


@main.command("import")
@click.argument("name")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--version", "version", help="the version to give it (default 1.0.0, or the export's)")
@click.option("--subdir", default="", metavar="DIR", help="strip DIR/ from the patch's paths (python)")
@click.option("--package", help="the package it is for (default: the default target's)")
@click.option("-m", "--description", help="the patch set's description")
@json_option
@click.pass_context
@command
def import_cmd(
    ctx: click.Context,
    name: str,
    file: str,
    version: str | None,
    subdir: str,
    package: str | None,
    description: str | None,
    as_json: bool,
) -> int:
    """Make patch set NAME from a patch file, or restore one from `patchkeeper export`."""
    return import_patch(workspace_of(ctx), name, file, version, subdir, package, description, as_json=as_json)


@main.command()
@click.argument("name", shell_complete=complete_patchsets)
@json_option
@click.pass_context
@command
def export(ctx: click.Context, name: str, as_json: bool) -> int:
    """Print patch set NAME as one patch that git apply and patch -p1 accept in site-packages."""
    return run_export(workspace_of(ctx), name, as_json)


@main.command()
@click.argument("name", shell_complete=complete_patchsets)
@target_option
@click.option("--wheel", metavar="FILE.whl", help="check against a wheel's files instead of a target")
@json_option
@click.pass_context
@command
def check(ctx: click.Context, name: str, target: str | None, wheel: str | None, as_json: bool) -> int:
    """Would patch set NAME apply? Per file: clean, at an offset, or the failing hunk. Changes nothing."""
    return run_check(workspace_of(ctx), target, name, wheel, as_json)


@main.command()
@click.argument("name", shell_complete=complete_patchsets)
@json_option
@click.pass_context
@command
def show(ctx: click.Context, name: str, as_json: bool) -> int:
    """Patch set NAME: metadata, files, diffstat, and the targets it is applied on."""
    return run_show(workspace_of(ctx), name, as_json)


@main.command()
@click.argument("targets", nargs=-1, metavar="[TARGET [TARGET2]]", shell_complete=complete_targets)
@targets_option
@group_option
@click.option(
    "--against",
    metavar="STATE",
    shell_complete=complete_states,
    help="compare one target with this recorded state (default: its current one)",
)
@click.option("--patch", "-p", is_flag=True, help="add unified diffs of the differing text files")
@click.option(
    "--env",
    "environment",
    is_flag=True,
    help="compare environments (interpreter, system, distributions, native libraries, GPU) instead of "
    "files; a side may be TARGET:STATE",
)
@click.option(
    "--since-pass",
    is_flag=True,
    help="with --env: compare with the last passing verification of the target's current code state",
)
@json_option
@click.option("--all", "every", is_flag=True, help="every target in the workspace, concurrently, one table")
@click.pass_context
@command
def diff(
    ctx: click.Context,
    targets: tuple[str, ...],
    targets_: tuple[str, ...],
    group: str | None,
    against: str | None,
    patch: bool,
    environment: bool,
    since_pass: bool,
    as_json: bool,
    every: bool,
) -> int:
    """What differs on TARGET (or -t TARGET) from its recorded state, and which patch set owns it; or
    TARGET against TARGET2, side by side (-g GROUP, --all: each target against its own record).
    Exit 0 when nothing differs, 1 when something does."""
    targets = tuple(targets_) + tuple(targets)
    if every or group:
        if targets or against or patch or environment:
            raise click.UsageError(
                "--all and -g compare each target with its own recorded state: "
                "no TARGET, --against, --patch or --env"
            )

        return diff_all(workspace_of(ctx).select((), group, every), as_json)
    if since_pass and (not environment or against or len(targets) > 1):
        raise click.UsageError(
            "--since-pass goes with --env and one target: patchkeeper diff --env -t T --since-pass"
        )
    if environment:
        if patch:
            raise click.UsageError("--patch shows file contents; it does not go with --env")
        return diff_env(workspace_of(ctx), targets, against, as_json, since_pass)

    return run_diff(workspace_of(ctx), targets, against, patch, as_json)


@main.command()
@click.argument("name", shell_complete=complete_patchsets)
@click.option("--to", metavar="VERSION", help="the release of the package to carry the patch set to")
@click.option(
    "--wheel", "given", multiple=True, metavar="FILE.whl", help="the old or the new release's wheel"
)
@target_option
@bump_option
@click.option(
    "--continue", "resume", is_flag=True, help="finish a port that stopped, from its scratch directory"
)
@click.option("--dry-run", "-n", is_flag=True, help="print the report; write nothing")
@json_option
@click.pass_context
@command
def port(
    ctx: click.Context,
    name: str,
    to: str | None,
    given: tuple[str, ...],
    target: str | None,
    bump: str | None,
    resume: bool,
    dry_run: bool,
    as_json: bool,
) -> int:
    """Carry patch set NAME to release VERSION of its package: a three-way merge per file and hunk;
    written as its next version when nothing conflicts (exit 0), else left to resolve (exit 1)."""

    return run_port(workspace_of(ctx), name, to, tuple(given), target, as_json, dry_run, bump, resume)


@main.command("env")
@target_option
@json_option
@click.pass_context
@command
def env_cmd(ctx: click.Context, target: str | None, as_json: bool) -> int:
    """The target's environment: interpreter, system, GPU stack, distributions, native libraries."""
    return run_env(workspace_of(ctx), target, as_json)


@main.command("verify")
@targets_option
@group_option
@json_option
@click.option("--restart", "with_restart", is_flag=True, help="run the service's restart command first")
@click.option("--all", "every", is_flag=True, help="every target in the workspace, concurrently, one table")
@click.pass_context
@command
def verify_cmd(
    ctx: click.Context,
    targets_: tuple[str, ...],
    group: str | None,
    as_json: bool,
    with_restart: bool,
    every: bool,
) -> int:
    """Check the target's service: it answers, runs the unit's command and speculative algorithm, and
    generates enough, fast enough, not degenerate, the same greedy output as before.

    Exit 0 when it passes, 1 when a check fails (nothing is changed or rolled back): then what changed
    since the code state last passed, and the command to run next.
    """

    picked = chosen(ctx, targets_, group, every)
    if picked is not None:
        return verify_verb.verify_all(picked, as_json, with_restart)
    return verify_verb.verify(workspace_of(ctx), targets_[0] if targets_ else None, as_json, with_restart)


@main.command("mcp")
@click.option("--read-only", is_flag=True, help="serve only the reading tools: no plan, no apply_plan")
@click.pass_context
@command
def mcp_cmd(ctx: click.Context, read_only: bool) -> int:
    """Serve this workspace to an AI agent: an MCP server over stdin and stdout (docs/agents.md).

    Needs the optional extra: pip install 'patchkeeper[mcp]'. Tools return the verbs' --json
    documents; a change runs only through `plan` then `apply_plan` of a fresh plan.
    """
    ws = workspace_of(ctx)
    group = ctx.find_root().command
    assert isinstance(group, click.Group)
    inventory = ctx.obj.get("inventory")
    base = [f"--workspace={ws.root}"] + ([f"--inventory={inventory}"] if inventory else [])
    return mcp_server.serve(mcp_server.Served(group, base, lambda: workspace_of(ctx), read_only))


if __name__ == "__main__":  # pragma: no cover
    main()
