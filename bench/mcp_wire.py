"""Peak memory (VmHWM) of `patchkeeper mcp` reading one long line on stdin, then a ping (bench/MCP_WIRE.md).

Run from the repository with its venv: `.venv/bin/python bench/mcp_wire.py [MEGABYTES]` (default 200).
It makes a workspace of one target over a hardlinked copy of the tests' sglang venv (PK_SGLANG_VENV),
beside the repository, and removes it at the end.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from conftest import PRISTINE, copy_venv, make_workspace  # noqa: E402 (the tests' workspace maker)
from mcpclient import Wire  # noqa: E402


def main() -> None:
    size = int(sys.argv[1] if len(sys.argv) > 1 else 200) * 10**6
    with tempfile.TemporaryDirectory(dir=REPO, prefix=".bench-mcp-wire-") as scratch:
        tmp = Path(scratch)  # beside the repository: the hardlinks need the venv's filesystem
        env = make_workspace(tmp / "ws", copy_venv(PRISTINE, tmp / "venv"))
        wire = Wire(env.root, errlog=tmp / "server.log")
        before = wire.peak_memory()
        head = b'{"jsonrpc": "2.0", "id": "long", "method": "ping", "params": {"_meta": {"pad": "'
        tail = b'"}}}\n'
        wire.send(head + b"x" * (size - len(head) - len(tail) + 1) + tail)
        wire.send(b'{"jsonrpc": "2.0", "id": "after", "method": "ping"}\n')
        answers = [wire.answer(), wire.answer()]
        after = wire.peak_memory()
        assert wire.close() == 0
    print(json.dumps(answers)[:300])
    print(
        f"line {size / 2**20:.0f} MiB: VmHWM {before / 2**20:.0f} MiB before it, {after / 2**20:.0f} MiB "
        f"after, +{(after - before) / 2**20:.0f} MiB"
    )


if __name__ == "__main__":
    main()
