"""The CLI imports heavy libraries only where a command needs them: `python -X importtime` of status, audit,
diff and apply on a local target never loads paramiko, GitPython, packaging or http (each costs tens of
milliseconds on every run)."""

from __future__ import annotations

from helpers import heavy, imported


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
