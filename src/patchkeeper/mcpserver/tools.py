"""The MCP server's tools: each one's schema, and the CLI words it runs, built only from checked
values (a name the workspace knows, a state spec, a bounded integer): nothing an agent passes
becomes a path, an option or a shell word unchecked."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import BadInput
from ..patchset import patchset
from ..workspace import Workspace

MAX_TEXT = 200  # characters of any string argument
MAX_TARGETS = 1000
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # a patch set's, target's, group's or state's name
_DIST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")  # a distribution (PEP 508)

NAME_SCHEMA: dict[str, Any] = {"type": "string", "pattern": f"^{_NAME.pattern}$", "maxLength": MAX_TEXT}
TARGETS_SCHEMA: dict[str, Any] = {
    "type": "array",
    "items": NAME_SCHEMA,
    "maxItems": MAX_TARGETS,
    "uniqueItems": True,  # a name twice would make one target a rollout of several
    "description": "targets by name (-t, repeated), each once; default: the workspace's default_target",
}
WHERE: dict[str, Any] = {
    "targets": TARGETS_SCHEMA,
    "group": {**NAME_SCHEMA, "description": "the targets of a group (-g)"},
    "all": {"type": "boolean", "description": "every target of the workspace (--all)"},
}


@dataclass(frozen=True)
class Tool:
    """A tool: its name, what it does, its arguments' schema, and how its CLI words are made."""

    name: str
    description: str
    properties: dict[str, Any]
    required: tuple[str, ...]
    reads: bool  # a reading tool: served with --read-only too
    words: Callable[[Workspace, Mapping[str, Any]], list[str]] | None = None

    def schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": self.properties,
            "required": list(self.required),
            "additionalProperties": False,
        }


def check_arguments(tool: Tool, args: Mapping[str, Any]) -> None:
    """The arguments match the schema: known keys, the right types, bounded sizes (whatever the client checked)."""
    unknown = sorted(set(args) - set(tool.properties))
    if unknown:
        raise BadInput(
            f"{tool.name}: unknown argument(s) {', '.join(repr(k[:40]) for k in unknown[:5])}",
            f"{tool.name} takes {', '.join(sorted(tool.properties)) or 'no arguments'}",
        )
    missing = [k for k in tool.required if k not in args]
    if missing:
        raise BadInput(
            f"{tool.name}: missing argument(s) {', '.join(missing)}", "see the tool's input schema"
        )
    for key, value in args.items():
        _check(tool.name, key, tool.properties[key], value)


def _check(tool: str, key: str, schema: Mapping[str, Any], value: Any) -> None:
    kind = schema.get("type")
    ok = {
        "string": isinstance(value, str),
        "boolean": isinstance(value, bool),
        "integer": isinstance(value, int) and not isinstance(value, bool),
        "array": isinstance(value, list),
    }.get(str(kind), False)
    if not ok:
        raise BadInput(f"{tool}: {key} must be of type {kind}", "see the tool's input schema")
    if isinstance(value, str):
        if len(value) > MAX_TEXT:
            raise BadInput(f"{tool}: {key} is {len(value)} characters long, over {MAX_TEXT}", "pass a name")
        if "enum" in schema and value not in schema["enum"]:
            raise BadInput(
                f"{tool}: {key} {value[:40]!r} is not one of {', '.join(schema['enum'])}",
                "see the tool's input schema",
            )
        if "pattern" in schema and not re.fullmatch(schema["pattern"].strip("^$"), value):
            if key == "plan_id":
                raise BadInput(
                    f"{tool}: {value[:40]!r} is not a plan id (16 lowercase hex digits)",
                    "pass the plan.id that the plan tool returned",
                )
            raise BadInput(
                f"{tool}: {key} {value!r} is not a name (letters, digits, '.', '_', '-'; no path, no option)",
                "pass a name as `list`, `status` or `log` show it",
            )
    if isinstance(value, int) and not isinstance(value, bool):
        low, high = schema.get("minimum"), schema.get("maximum")
        if (low is not None and value < low) or (high is not None and value > high):
            raise BadInput(f"{tool}: {key} must be between {low} and {high}", "see the tool's input schema")
    if isinstance(value, list):
        if schema.get("uniqueItems"):  # names as given: the workspace matches a target's name exactly
            seen: set[str] = set()
            for item in (v for v in value if isinstance(v, str)):
                if item in seen:
                    raise BadInput(f"{tool}: {key} names {item[:60]!r} twice", f"name each of the {key} once")
                seen.add(item)
        if len(value) > schema.get("maxItems", MAX_TARGETS):
            raise BadInput(f"{tool}: {key} lists {len(value)} items, too many", "name fewer")
        for item in value:
            _check(tool, key, schema["items"], item)


def patchset_name(ws: Workspace, name: str) -> str:
    """A patch set of the workspace, by its name (the CLI's rule), never a path."""
    known = patchset.names(ws.patchsets_dir)
    if name not in known:
        raise BadInput(
            f"unknown patch set {name!r} (known: {', '.join(known) or 'none'})",
            "call `list` for the workspace's patch sets",
        )
    return name


def where(ws: Workspace, args: Mapping[str, Any], several: bool = True) -> list[str]:
    """-t (each a target of the workspace), -g (a group of it), --all as CLI words."""
    targets = list(args.get("targets") or ())
    group, every = args.get("group"), bool(args.get("all"))
    for name in targets:
        ws.target(name)  # unknown: refused with the known ones (BadInput)
    if group is not None and group not in ws.groups:
        raise BadInput(
            f"unknown group {group!r} (known: {', '.join(sorted(ws.groups)) or 'none'})",
            "call `status` with all: true for the workspace's targets",
        )
    if not several and (len(targets) > 1 or group is not None or every):
        raise BadInput("this tool works on one target", "pass one name in targets")
    if every and (targets or group):
        raise BadInput("all takes every target: no targets or group with it", "pass one of them")
    return (
        [f"--target={t}" for t in targets]
        + ([f"--group={group}"] if group is not None else [])
        + (["--all"] if every else [])
    )


def _flag(args: Mapping[str, Any], key: str, word: str) -> list[str]:
    return [word] if args.get(key) else []


def _list(ws: Workspace, args: Mapping[str, Any]) -> list[str]:
    return ["list", "--json"]


def _show(ws: Workspace, args: Mapping[str, Any]) -> list[str]:
    return ["show", "--json", "--", patchset_name(ws, args["name"])]


def _status(ws: Workspace, args: Mapping[str, Any]) -> list[str]:
    return ["status", "--json", *where(ws, args)]


def _log(ws: Workspace, args: Mapping[str, Any]) -> list[str]:
    return ["log", "--json", *where(ws, args)]


def _audit(ws: Workspace, args: Mapping[str, Any]) -> list[str]:
    return ["audit", "--json", "--quiet", *where(ws, args), *_flag(args, "rehash", "--rehash")]


def _check_set(ws: Workspace, args: Mapping[str, Any]) -> list[str]:
    return ["check", "--json", *where(ws, args, several=False), "--", patchset_name(ws, args["name"])]


def _verify(ws: Workspace, args: Mapping[str, Any]) -> list[str]:
    return ["verify", "--json", *where(ws, args), *_flag(args, "restart", "--restart")]


def _diff(ws: Workspace, args: Mapping[str, Any]) -> list[str]:
    sides = list(args.get("sides") or ())
    for name in sides:
        ws.target(name)
    words = ["diff", "--json", *where(ws, args)]
    if args.get("against") is not None:
        words.append(f"--against={args['against']}")
    words += _flag(args, "patch", "--patch") + _flag(args, "env", "--env")
    return words + ["--", *sides]


SIDES = {
    "type": "array",
    "items": NAME_SCHEMA,
    "maxItems": 2,
    "uniqueItems": True,  # a target against itself compares nothing
    "description": "one target (against its recorded state), or two (host against host)",
}
STATE = {**NAME_SCHEMA, "description": "baseline | previous | a state name | a state id | a transaction id"}
VERIFY_ARG = {
    "type": "boolean",
    "description": "with a [service]: restart and verify it after the change, roll back when it fails (default true)",
}

READING = [
    Tool("list", "The workspace's patch sets (`patchkeeper list --json`).", {}, (), True, _list),
    Tool(
        "show",
        "A patch set: metadata, files, diffstat, where it is applied (`show NAME --json`).",
        {"name": NAME_SCHEMA},
        ("name",),
        True,
        _show,
    ),
    Tool(
        "status",
        "The applied stack and whether the files match the recorded state (`status --json`).",
        dict(WHERE),
        (),
        True,
        _status,
    ),
    Tool(
        "audit",
        "What differs in site-packages and why: patched, drift, environment, native, bytecode (`audit --json`).",
        {**WHERE, "rehash": {"type": "boolean", "description": "trust no cache (--rehash)"}},
        (),
        True,
        _audit,
    ),
    Tool(
        "diff",
        "What differs from the recorded state, or between two targets; env: environments (`diff --json`).",
        {
            **WHERE,
            "sides": SIDES,
            "against": STATE,
            "patch": {"type": "boolean", "description": "add unified diffs (--patch)"},
            "env": {"type": "boolean", "description": "compare environments instead of files (--env)"},
        },
        (),
        True,
        _diff,
    ),
    Tool("log", "Every transaction on the target, newest first (`log --json`).", dict(WHERE), (), True, _log),
    Tool(
        "check",
        "Would a patch set apply on a target? Per file: clean, offset or the failing hunk (`check --json`).",
        {"name": NAME_SCHEMA, "targets": {**TARGETS_SCHEMA, "maxItems": 1}},
        ("name",),
        True,
        _check_set,
    ),
    Tool(
        "verify",
        "Check the target's service: it generates, runs the unit's algorithm (`verify --json`). "
        "restart: restart it first (not served with --read-only).",
        {**WHERE, "restart": {"type": "boolean", "description": "restart the service first (--restart)"}},
        (),
        True,
        _verify,
    ),
]

CHANGING = [
    Tool(
        "plan",
        "Preview a change and get a plan id: action apply (name), rollback (to) or repair (dist). "
        "Returns the dry run's document, every file with its digests, the state it starts from, and "
        "plan.id for apply_plan. Nothing changes.",
        {
            "action": {"type": "string", "enum": ["apply", "rollback", "repair"]},
            "name": {**NAME_SCHEMA, "description": "apply: the patch set"},
            "to": STATE,
            "dist": {**NAME_SCHEMA, "description": "repair: the installed distribution"},
            **WHERE,
            "serial": {"type": "integer", "minimum": 1, "maximum": MAX_TARGETS},
            "max_fail": {"type": "integer", "minimum": 0, "maximum": MAX_TARGETS},
            "force": {"type": "boolean", "description": "apply: over hand edits (backed up first)"},
            "restore_pristine": {
                "type": "boolean",
                "description": "apply, repair: before the target's first baseline, give files that differ "
                "from the release's RECORD its bytes first (--restore-pristine; the plan shows them)",
            },
            "accept_edits": {
                "type": "boolean",
                "description": "apply, repair: before the target's first baseline, record files that differ "
                "from the release's RECORD as they are (--accept-edits)",
            },
            "verify": VERIFY_ARG,
        },
        ("action",),
        False,
    ),
    Tool(
        "apply_plan",
        "Carry out a plan of this session, only if every target is still in the state the plan was "
        "made on (else refused: make a new plan). Returns the change's document: states, files, "
        "verification verdict, automatic rollback.",
        {"plan_id": {"type": "string", "pattern": "^[0-9a-f]{16}$", "maxLength": 16}},
        ("plan_id",),
        False,
    ),
]


ADOPT = {
    "restore_pristine": "--restore-pristine",
    "accept_edits": "--accept-edits",
}  # before a first baseline


def change_words(ws: Workspace, args: Mapping[str, Any], dry_run: bool) -> list[str]:
    """The CLI words of a plan's change (with --dry-run: its preview)."""
    action = args["action"]
    takes = {"apply": "name", "rollback": "to", "repair": "dist"}
    stray = [k for k in takes.values() if k in args and takes.get(action) != k]
    stray += [k for k in ("serial", "max_fail", "force") if k in args and action == "repair"]
    stray += [k for k in ("force", *ADOPT) if k in args and action == "rollback"]
    if stray:
        raise BadInput(
            f"plan {action}: {', '.join(stray)} does not go with it",
            "apply takes name (force, restore_pristine or accept_edits), rollback takes to, repair takes "
            "dist (one target; restore_pristine or accept_edits)",
        )
    if all(args.get(k) for k in ADOPT):
        raise BadInput(
            f"plan {action}: restore_pristine and accept_edits exclude each other", "pass one of them"
        )
    tail = ["--json"] + (["--dry-run"] if dry_run else [])
    tail += [word for key, word in ADOPT.items() if args.get(key)]
    if args.get("verify") is False:
        tail.append("--no-verify")
    if action == "repair":
        if "dist" not in args:
            raise BadInput("plan repair needs dist", "pass dist: the distribution to repair")
        if not _DIST.fullmatch(args["dist"]):
            raise BadInput(
                f"{args['dist']!r} is not a distribution's name", "pass a name as `audit` shows it"
            )
        return ["repair", *where(ws, args, several=False), *tail, "--", args["dist"]]
    rollout = [f"--serial={args['serial']}"] if "serial" in args else []
    rollout += [f"--max-fail={args['max_fail']}"] if "max_fail" in args else []
    if action == "apply":
        if "name" not in args:
            raise BadInput("plan apply needs name", "pass name: the patch set to apply")
        force = ["--force"] if args.get("force") else []
        return ["apply", *where(ws, args), *rollout, *force, *tail, "--", patchset_name(ws, args["name"])]
    if action == "rollback":
        if "to" not in args:
            raise BadInput("plan rollback needs to", "pass to: baseline, previous, a state name or id")
        return ["rollback", *where(ws, args), *rollout, *tail, f"--to={args['to']}"]
    raise BadInput(f"unknown action {action!r}", "action is apply, rollback or repair")


def chosen_targets(ws: Workspace, args: Mapping[str, Any]) -> list[str]:
    """The names of the targets a plan changes, as the CLI picks them."""
    if args.get("all"):
        return sorted(ws.targets)
    names = set(args.get("targets") or ())
    if args.get("group") is not None:
        names |= set(ws.groups[args["group"]])
    if not names:
        return [ws.target(None).name]
    return sorted(names)


def served(read_only: bool) -> list[Tool]:
    return READING if read_only else READING + CHANGING


def find(name: str, read_only: bool) -> Tool:
    for tool in READING + CHANGING:
        if tool.name == name:
            if read_only and not tool.reads:
                raise BadInput(
                    f"{name} changes targets, and this server is read-only (patchkeeper mcp --read-only)",
                    "use the reading tools, or ask for a server without --read-only",
                )
            return tool
    raise BadInput(f"unknown tool {name[:60]!r}", "call tools/list for the tools served")
