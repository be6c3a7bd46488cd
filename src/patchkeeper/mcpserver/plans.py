"""The MCP server's plans: a change runs only through a plan id of the same session, once, and only
while each target is in the state the plan was made on (its fingerprint: the ledger's newest entry,
the recorded state, and the digests of the managed files as they are) and the workspace (its
patchkeeper.toml, its patch sets, and the targets and groups it resolves, an inventory's among them)
is as it was."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import click

from ..change import adopt as adopting
from ..change.session import Session
from ..checks.scan import scan_all
from ..errors import PatchkeeperError, Refused
from ..workspace import CONFIG, Workspace
from . import tools, verbs

OnLine = Callable[[str], None]


@dataclass(frozen=True)
class Seen:
    """A target as a plan saw it: its ledger's length and newest entry, its recorded state, its files."""

    entries: int
    newest: str | None
    state: str | None  # the recorded state's id
    digest: str  # all of it (the state's whole record, the files' manifest) as one digest

    def moved(self, now: Seen) -> str:
        """What changed since, in words."""
        if now.state != self.state:
            return f"its recorded state is now {now.state or 'none'} (was {self.state or 'none'})"
        if now.entries != self.entries or now.newest != self.newest:
            return f"its ledger has {now.entries - self.entries} new entry(ies)"
        return "its files changed outside patchkeeper"


def fingerprint(ws: Workspace, target: str, tool: str = "plan") -> Seen:
    """The state a change on `target` starts from; reads only (a dry run's session, named after the
    `tool` that asks)."""
    with Session(ws, target, f"mcp {tool}", write=False, hands_off=True) as s:
        entries = s.ledger.entries()
        current = s.ledger.current()
        files = scan_all(s.target).to_text()
        newest = entries[len(entries) - 1].id if len(entries) else None
        seen = {
            "entries": len(entries),
            "newest": newest,
            "state": current.to_dict() if current else None,
            "files": s.target.hash_bytes(files),
        }
    digest = "sha256:" + hashlib.sha256(json.dumps(seen, sort_keys=True).encode()).hexdigest()
    return Seen(len(entries), newest, current.id if current else None, digest)


def adoption(ws: Workspace, target: str, mode: str) -> dict[str, str] | None:
    """What --restore-pristine or --accept-edits (`mode`) would do on `target` before its change: its
    hand edits (key -> changed, missing, added, bytecode) given the release's bytes or recorded as they
    are; None where a baseline is recorded already (they do nothing there). Reads only."""
    with Session(ws, target, f"mcp plan --{mode}", write=False, hands_off=True) as s:
        if s.ledger.current() is not None and not adopting.new_release(s):
            return None
        return adopting.hand_edits(s)[1]


def workspace_digest(ws: Workspace) -> str:
    """patchkeeper.toml, every file under patchsets/, and every target and group as the workspace
    resolves them (an inventory's too: a file named by patchkeeper.toml or the server's --inventory,
    or a script's output, read anew by every command), as one digest."""
    h = hashlib.sha256()
    paths = [ws.root / CONFIG] + sorted(p for p in ws.patchsets_dir.rglob("*") if p.is_file())
    for path in paths:
        h.update(os.fsencode(path.relative_to(ws.root)) + b"\0" + path.read_bytes() + b"\0")
    resolved = {
        "default_target": ws.default_target,
        "wheels": ws.wheels,
        "groups": ws.groups,
        "targets": {
            name: {f.name: getattr(config, f.name) for f in fields(config) if f.compare}
            for name, config in ws.targets.items()
        },
    }
    h.update(json.dumps(resolved, sort_keys=True, default=str).encode())
    return "sha256:" + h.hexdigest()


@dataclass
class Plan:
    """A previewed change: the CLI words that carry it out, and what it starts from."""

    id: str
    command: list[str]
    starts_from: dict[str, Seen]
    workspace: str
    states: dict[str, str | None]  # target -> the state id its dry run started from (None: not known)
    adopts: dict[str, Any] | None = None  # --restore-pristine / --accept-edits: the hand edits, per target
    used: bool = False

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "command": " ".join(w for w in self.command if w not in ("--json", "--")),
            "starts_from": {name: seen.digest for name, seen in self.starts_from.items()},
            "workspace": self.workspace,
            **({"adopts": self.adopts} if self.adopts is not None else {}),
            "apply_with": {"tool": "apply_plan", "arguments": {"plan_id": self.id}},
        }


@dataclass
class Plans:
    """The plans of one session (one client connection): made by `plan`, spent by `apply_plan`."""

    group: click.Group
    base: list[str]  # the server's --workspace and --inventory
    load: Callable[[], Workspace]
    made: dict[str, Plan] = field(default_factory=dict)

    def plan(self, args: Mapping[str, Any], on_line: OnLine) -> verbs.Outcome:
        """Each target's dry run; a plan id when every one of them succeeds and none moved meanwhile."""
        ws = self.load()
        words = tools.change_words(ws, args, dry_run=False)
        names = tools.chosen_targets(ws, args)
        before = {name: fingerprint(ws, name) for name in names}
        digest = workspace_digest(ws)
        docs: dict[str, Any] = {}
        worst = 0
        for name in names:
            one = {
                k: v for k, v in args.items() if k not in ("targets", "group", "all", "serial", "max_fail")
            }
            on_line(f"{name}: planning {' '.join(words[:1])}")
            out = verbs.run(
                self.group, self.base, tools.change_words(ws, {**one, "targets": [name]}, True), on_line
            )
            if out.failed:
                out = verbs.Outcome(out.code, _in_tool_arguments(out.doc))
                return (
                    out
                    if len(names) == 1
                    else verbs.Outcome(out.code, _several(docs | {name: out.doc}, out.code))
                )
            docs[name] = out.doc
            worst = max(worst, out.code)
        mode = next((word[2:] for word in words if word in tools.ADOPT.values()), None)
        adopts = (
            {"mode": mode, "hand_edits": {name: adoption(ws, name, mode) for name in names}}
            if mode is not None
            else None
        )
        if {name: fingerprint(ws, name) for name in names} != before or workspace_digest(ws) != digest:
            raise Refused(
                "a target or the workspace changed while the plan was being made",
                "make the plan again when nothing else is changing them",
            )
        states = {name: (doc.get("before") or {}).get("id") for name, doc in docs.items()}
        plan = Plan(os.urandom(8).hex(), words, before, digest, states, adopts)
        self.made[plan.id] = plan
        if len(names) == 1:
            return verbs.Outcome(worst, {**docs[names[0]], "plan": plan.summary()})
        return verbs.Outcome(worst, {**_several(docs, worst), "plan": plan.summary()})

    def apply(self, plan_id: str, on_line: OnLine, client: str | None) -> verbs.Outcome:
        """The plan's change, when it is this session's, not spent, and nothing moved since."""
        plan = self.made.get(plan_id)
        if plan is None:
            raise Refused(
                f"no plan {plan_id} in this session (plans live as long as the connection that made them)",
                "call plan first, then apply_plan with the plan.id it returns",
            )
        if plan.used:
            raise Refused(f"plan {plan_id} was carried out already", "call plan again for a new change")
        ws = self.load()
        if workspace_digest(ws) != plan.workspace:
            raise Refused(
                f"the workspace changed since plan {plan_id} (patchkeeper.toml, a patch set, or a target "
                "or group as it or its inventory gives them)",
                "call plan again and review what it would change now",
            )
        moved = {
            name: was.moved(now)
            for name, was in plan.starts_from.items()
            if (now := fingerprint(ws, name, "apply_plan")) != was
        }
        if moved:
            raise Refused(
                f"plan {plan_id} is stale: "
                + "; ".join(f"target {name} changed since it was made: {why}" for name, why in moved.items()),
                "call plan again and review what it would change now",
            )
        plan.used = True  # before the change: a second call meanwhile is refused
        on_line(f"carrying out plan {plan_id}: {' '.join(plan.command[:1])}")
        out = verbs.run(self.group, self.base, plan.command, on_line, client)
        if out.failed and _unmoved(ws, plan):
            plan.used = (
                False  # refused before it wrote anything (another command's lock): it may be tried again
            )
        if not isinstance(out.doc, dict):
            return verbs.Outcome(out.code, out.doc, change=True)
        summary = plan.summary()
        other = {
            name: {"planned": plan.states.get(name), "actual": was}
            for name, was in _started_from(out.doc).items()
            if was is not None and plan.states.get(name) is not None and was != plan.states[name]
        }
        if other:  # another command changed the target between the check and the change's lock
            summary["started_from_another_state"] = other
        code = out.code or (2 if other else 0)
        return verbs.Outcome(code, {**out.doc, "plan": summary}, change=True)


def _unmoved(ws: Workspace, plan: Plan) -> bool:
    """Whether every target of `plan` is still as the plan saw it (a failed change wrote nothing)."""
    try:
        return all(fingerprint(ws, name, "apply_plan") == was for name, was in plan.starts_from.items())
    except PatchkeeperError:  # a target that cannot be read now: the plan stays spent
        return False


def _started_from(doc: dict[str, Any]) -> dict[str, str | None]:
    """The state id each target's change started from, in a change or a rollout document."""
    if isinstance(doc.get("targets"), dict):
        return {name: t.get("before") for name, t in doc["targets"].items() if isinstance(t, dict)}
    before = doc.get("before")
    return {str(doc.get("target")): before.get("id") if isinstance(before, dict) else None}


def _in_tool_arguments(doc: Any) -> Any:
    """A dry run's refusal as the plan tool's caller can act on it: the hint names the tool's
    arguments (`restore_pristine: true`) where the command's names its flags (--restore-pristine)."""
    error = doc.get("error") if isinstance(doc, dict) else None
    if not isinstance(error, dict) or not isinstance(error.get("hint"), str):
        return doc
    hint = error["hint"]
    for argument, flag in tools.ADOPT.items():
        hint = hint.replace(flag, f"the plan argument `{argument}: true`")
    return {**doc, "error": {**error, "hint": hint}}


def _several(docs: Mapping[str, Any], code: int) -> dict[str, Any]:
    return {
        "schema": "patchkeeper/plan",
        "schema_version": 1,
        "dry_run": True,
        "exit_code": code,
        "ok": code == 0,
        "targets": dict(docs),
    }
