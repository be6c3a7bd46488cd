"""Issue 5 figures: the time verification adds to an apply, against a bare curl of the same endpoints.

The server (tests/fake_openai.py, healthy) is already up and answers at once, and the restart command
is `true`, so what is left is patchkeeper's own cost: the probe's start-up on the target, the ledger
entry, the report. Goal: verification costs less than 0.3 s more than curl asking the same questions.
Rows have the same keys as bench/common.py's `row` so bench/run.py can collect them.
"""

from __future__ import annotations

import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import PK, PRISTINE, REPO, median, row, run  # noqa: E402

FAKE = REPO / "tests" / "fake_openai.py"
PROMPT = "Write a Python function that returns the n-th Fibonacci number."
REPEAT = 9


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _workspace(root: Path, venv: Path, port: int) -> Path:
    root.mkdir(parents=True)
    shutil.copytree(REPO / "patchsets", root / "patchsets")
    unit = root / "sglang-qwen.service"
    shutil.copy(REPO / "demo" / "sglang-qwen.service", unit)
    (root / "patchkeeper.toml").write_text(
        f'default_target = "local"\n[targets.local]\npython = "{venv}/bin/python"\npackage = "sglang"\n'
        f'[targets.local.vars]\ndraft_model_path = "/root/models/Qwen3.6-27B-DFlash"\n'
        f'[targets.local.files]\nunit = "{unit}"\n'
        f'[targets.local.service]\nrestart = "true"\nbase_url = "http://127.0.0.1:{port}"\nready_timeout = 30\n'
        f'match_unit = false\n'  # the bench's server is not started from the unit
        f'[targets.local.service.smoke]\nprompt = "{PROMPT}"\nmax_tokens = 64\ntimeout = 30\n'
        f'min_tokens = 16\nmin_tokens_per_s = 5\n')
    return root


def main() -> list[dict]:
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="pk-bench-verify-") as t:
        tmp = Path(t)
        venv = tmp / "venv"
        subprocess.run(["cp", "-al", str(PRISTINE), str(venv)], check=True)
        port = _free_port()
        ws = _workspace(tmp / "ws", venv, port)
        server = [sys.executable, str(FAKE), "--port", str(port), "--pidfile", str(tmp / "pid"),
                  "--log", str(tmp / "log")]
        subprocess.run([server[0], server[1], "start", *server[2:]], check=True, stdout=subprocess.DEVNULL)
        try:
            pk = PK + ["--workspace", str(ws)]
            run(pk + ["snapshot", "--name", "bench-start"])  # the baseline, outside the timing
            run(pk + ["verify"])  # the server is up and answers (this waits for it to bind)

            def apply_then_rollback(*flags: str) -> float:
                took = run(pk + ["apply", "ddtree", *flags])
                run(pk + ["rollback", "--to", "baseline", "--no-verify"])
                return took

            pairs = [(apply_then_rollback("--no-verify"), apply_then_rollback()) for _ in range(REPEAT)]
            bare = statistics.median(b for b, _ in pairs)  # interleaved, so load changes hit both alike
            verified = statistics.median(v for _, v in pairs)
            added = statistics.median(v - b for b, v in pairs)
            base = f"http://127.0.0.1:{port}"
            body = json.dumps({"model": "qwen3-8b", "prompt": PROMPT, "max_tokens": 64, "temperature": 0})
            curl = median(lambda: run(["curl", "-sf", "-o", "/dev/null", base + "/v1/models"])
                           + run(["curl", "-sf", "-o", "/dev/null", "-H", "Content-Type: application/json",
                                   "-d", body, base + "/v1/completions"]))
            alone = median(lambda: run(pk + ["verify"]), REPEAT)
            startup = median(lambda: run(PK + ["--version"]))
            probe_src = (REPO / "src" / "patchkeeper" / "host" / "probe_http.py").read_text()
            request = json.dumps({"base_url": base, "window": 5, "interval": 0.1,
                                  "generate": {"prompt": PROMPT, "max_tokens": 64, "timeout": 30,
                                               "endpoint": "completions", "model": None}}).encode()

            def probe() -> float:
                t0 = time.perf_counter()
                subprocess.run([str(venv / "bin" / "python"), "-I", "-c", probe_src], input=request,
                               capture_output=True, check=True)
                return time.perf_counter() - t0

            probe_s = median(probe)
        finally:
            subprocess.run([server[0], server[1], "stop", *server[2:]], check=False)
    rows.append(row("verification added to `apply ddtree` (paired)", added, "curl /v1/models + /v1/completions", curl,
                     f"added - curl < 0.3 s: {added - curl:.3f} s {'ok' if added - curl < 0.3 else 'MISSED'}"))
    rows.append(row("`patchkeeper verify` (no restart)", alone, "curl /v1/models + /v1/completions", curl,
                     "the checks alone, with the ledger entry"))
    rows.append(row("the HTTP probe alone (python -I -c)", probe_s, "curl /v1/models + /v1/completions", curl,
                     "what runs on the target"))
    rows.append(row("`apply ddtree` with verification", verified, "`apply ddtree --no-verify`", bare, "-"))
    rows.append(row("`patchkeeper --version` (start-up)", startup, "curl /v1/models + /v1/completions", curl, "-"))
    print("\n## verify: the cost of verification when the server answers at once (medians of "
          f"{REPEAT})")
    print(f"{'measure':46} {'ours (s)':>9} {'peer':>36} {'peer (s)':>9} {'ratio':>7}  goal")
    for r in rows:
        ratio = f"{r['ratio']:.2f}x" if r.get("ratio") is not None else "-"
        print(f"{r['measure']:46} {r['ours_s']:9.3f} {r['peer']:>36} {r['peer_s']:9.3f} {ratio:>7}  {r['goal']}")
    return rows


if __name__ == "__main__":
    main()
