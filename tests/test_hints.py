"""Every hint names something that works: each option an error's hint names exists on the verb that
can raise it (read from src/ with ast and a call graph from cli.py's verbs; the options from click's
own command tree), and each `patchkeeper VERB --option` it shows is a real verb with that option."""

from __future__ import annotations

import click
from hints import Graph, graph, hints, options_named, reached

from patchkeeper.cli import commands, main


def _options(command: click.Command) -> set[str]:
    return {o for p in command.params for o in (*p.opts, *p.secondary_opts)}


# Hints the call graph reaches from a verb that never gives them, and why (checked by reading the code).
UNREACHED = {
    (
        "patchkeeper.change.engine:plan_apply",
        "check",
        "--force",
    ): "check plans with trial=True, which refuses nothing",
    ("patchkeeper.change.stacks:check_fits", "check", "--force"): "plan_apply calls it only when not a trial",
    ("patchkeeper.change.reapply:plan_reapply", "check", "--force"): "a trial returns before a reapply",
}


def wrong_hints(g: Graph) -> list[str]:
    """What is wrong with the hints of src/: an option a verb that reaches the hint does not have."""
    common = _options(main) | {"--help", "-h"}  # the group's options go with every verb
    options = {name: _options(cmd) | common for name, cmd in commands().items()}
    reach = {verb: reached(g, key) for verb, key in g.verbs.items()}
    bad = []
    for h in hints(g):
        shown, bare = options_named(h.text, set(options))
        for verb, option in shown:
            if verb not in options:
                bad.append(f"{h.where}: no verb {verb!r}: {h.text!r}")
            elif option and option not in options[verb]:
                bad.append(f"{h.where}: `{verb}` has no {option}: {h.text!r}")
        for option in bare:
            lacking = sorted(
                v
                for v, r in reach.items()
                if h.function in r and option not in options[v] and (h.function, v, option) not in UNREACHED
            )
            if lacking:
                bad.append(f"{h.where}: {option}, which {', '.join(lacking)} do(es) not have: {h.text!r}")
    return bad


def test_every_option_a_hint_names_exists_on_the_verbs_that_give_it():
    g = graph()
    assert set(g.verbs) == set(commands())  # the walk found every verb
    found = hints(g)
    assert len(found) > 100 and sum(bool(options_named(h.text, set(g.verbs)) != ([], [])) for h in found) > 30
    assert not wrong_hints(g), "\n".join(wrong_hints(g))


def test_the_check_catches_an_option_a_verb_does_not_have():
    """The issue's case: a hint of the wheel download, reached from `apply`, naming --wheel."""
    g = graph()
    h = next(h for h in hints(g) if h.where.startswith("patchkeeper/checks/wheels.py"))
    assert any(h.function in reached(g, g.verbs[v]) for v in ("apply", "snapshot"))
    assert options_named("pass --wheel FILE", {"apply"}) == ([], ["--wheel"])
    assert options_named("run `patchkeeper rollback --to baseline` or `git log --oneline`", {"rollback"}) == (
        [("rollback", "--to")],
        [],
    )
    assert options_named("`patchkeeper lsit --x`", {"list"}) == ([("lsit", "--x")], [])
