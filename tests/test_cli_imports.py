"""The CLI imports heavy libraries only where a command needs them: `python -X importtime` of status, audit,
diff and apply on a local target never loads paramiko, GitPython, packaging or http (each costs tens of
milliseconds on every run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import edit_file

HEAVY = ("paramiko", "invoke", "git", "gitdb", "packaging", "http", "urllib.request", "ssl", "email")


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
