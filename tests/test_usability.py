"""Using patchkeeper as a new user would: pipes, names, completion, backups, demo, README (issue 13)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, copy_venv, edit_file, make_workspace


def _closed_reader(env, *args: str) -> subprocess.CompletedProcess:
    """Run the CLI with stdout a pipe whose reader has already left, as `| head` leaves it."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run([sys.executable, "-m", "patchkeeper", "--workspace", str(env.root), *args],
                              stdout=w, stderr=subprocess.PIPE, text=True)
    finally:
        os.close(w)


def test_output_into_a_pipe_whose_reader_left_stops_quietly(env):
    env.pk("apply", "ddtree")
    edit_file(env.site / "sglang/version.py", b"__version__ = 'edited'\n")
    for args, code in ((("status",), 0), (("log", "--json"), 0), (("diff", "-p"), 1), (("export", "ddtree"), 0)):
        proc = _closed_reader(env, *args)
        assert proc.stderr == "", (args, proc.stderr)
        assert proc.returncode in (code, 141), (args, proc.returncode)
