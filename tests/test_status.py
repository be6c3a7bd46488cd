"""`patchkeeper status` (commands/status.py): with the audit's caches warm it prints the audit's line too,
and one scan of the package serves both the differences and the audit."""

from __future__ import annotations

from conftest import edit_file

from patchkeeper import workspace
from patchkeeper.commands import status as status_cmd
from patchkeeper.host.agent import Agent


def test_status_with_the_audit_scans_the_package_once(baselined, monkeypatch, capsys):
    env = baselined
    env.pk("apply", "ddtree", "--no-verify")
    env.pk("audit", "-q")  # the audit's stat caches are warm now: status audits too
    edit_file(env.site / "sglang" / "version.py", b"__version__ = 'by hand'\n")
    (env.site / "sglang" / "new_by_hand.py").write_text("X = 1\n")

    passes: list[str] = []  # agent calls that go over the whole package
    for name in ("compare_many", "audit_tree"):
        real = getattr(Agent, name)
        monkeypatch.setattr(
            Agent,
            name,
            lambda self, request, _real=real, _name=name: passes.append(_name) or _real(self, request),
        )
    ws = workspace.load(env.root)
    assert status_cmd.status(ws, None, False) == 0
    out = capsys.readouterr().out
    assert passes == ["audit_tree"], f"the package was gone over by {passes}"
    assert "2 file(s) differ from the recorded state" in out
    assert "changed  sglang/version.py" in out and "added    sglang/new_by_hand.py" in out
    assert "audit: code state " in out and "has 2 file(s) changed outside patchkeeper" in out

    # without the audit (--json) it compares on the target as before, and finds the same
    passes.clear()
    assert status_cmd.status(ws, None, True) == 0
    doc = capsys.readouterr().out
    assert '"sglang/version.py": "changed"' in doc and '"sglang/new_by_hand.py": "added"' in doc
    assert passes == ["compare_many"]
