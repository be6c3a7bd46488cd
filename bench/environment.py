"""Benchmark the environment fingerprint: `env` and `diff --env` against pip freeze and rsync.

- warm `patchkeeper env` of the sglang test target vs `pip freeze` on the same interpreter   goal <= 0.5x
- cold fingerprint of a torch + sglang site-packages vs `pip freeze` there                   (reported)
- `diff --env` of two hosts over the loopback sshd vs `rsync -a -n` of one site-packages     (reported)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import PRISTINE, REPO, SITE_REL, best, print_rows, row, run  # noqa: E402

sys.path.insert(0, str(REPO / "tests"))
from sshd import Sshd, write_client_config  # noqa: E402

TORCH = Path(os.environ.get("PK_TORCH_VENV", REPO / ".cache" / "torch-venv"))
PK = [sys.executable, "-m", "patchkeeper"]
RUNS = int(os.environ.get("PK_BENCH_RUNS", "3"))


def _toml(ws: Path, targets: dict[str, tuple[Path, str | None]]) -> None:
    ws.mkdir(parents=True, exist_ok=True)
    text = f'default_target = "{next(iter(targets))}"\n'
    for name, (venv, ssh) in targets.items():
        text += f'\n[targets.{name}]\npython = "{venv}/bin/python"\npackage = "sglang"\n'
        if ssh:
            text += f'ssh = "{ssh}"\n'
    (ws / "patchkeeper.toml").write_text(text)


def main() -> list[dict]:
    rows: list[dict] = []
    tmp = Path(tempfile.mkdtemp(prefix="pk-bench-env-"))
    try:
        # a real copy (hardlinks would have their ctimes moved by other copies: a cold cache forever)
        venv = tmp / "venv"
        subprocess.run(["cp", "-a", str(PRISTINE), str(venv)], check=True)
        ws = tmp / "ws"
        _toml(ws, {"local": (venv, None)})
        env_cmd = [*PK, "-w", str(ws), "env"]
        run(env_cmd)
        time.sleep(2.2)  # past the stat cache's racy-clean window
        run(env_cmd)
        warm = best(lambda: run(env_cmd), RUNS)
        freeze = best(lambda: run([str(venv / "bin/python"), "-m", "pip", "freeze"]), RUNS)
        rows.append(row("warm `env` of the sglang target", warm, "pip freeze", freeze, "<= 0.5x"))

        if (TORCH / "bin" / "python").exists():
            ws_t = tmp / "ws-torch"
            _toml(ws_t, {"torch": (TORCH, None)})
            state = ws_t / "state"
            with open(ws_t / "patchkeeper.toml", "a") as f:
                f.write(f'state_dir = "{state}"\n')

            def cold() -> float:
                shutil.rmtree(state, ignore_errors=True)
                return run([*PK, "-w", str(ws_t), "env"])

            t_cold = best(cold, 1 if RUNS < 3 else 2)
            t_freeze = best(lambda: run([str(TORCH / "bin/python"), "-m", "pip", "freeze"]), RUNS)
            rows.append(row("cold fingerprint, torch + sglang site-packages", t_cold, "pip freeze", t_freeze,
                            "report"))
        else:
            print(f"(no {TORCH}: `make bench` builds it; the torch row is skipped)")

        rows.append(_remote(tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print_rows("environment fingerprint", rows)
    return rows


def _remote(tmp: Path) -> dict:
    """`diff --env ct129 ct200` through the loopback sshd vs rsync -a -n of one site-packages."""
    sshd = Sshd.start(tmp / "sshd")
    try:
        home = tmp / "home"
        home.mkdir()
        write_client_config(home, sshd, ["ct129", "ct200"])
        venvs = {}
        for host in ("ct129", "ct200"):
            venvs[host] = tmp / f"venv-{host}"
            subprocess.run(["cp", "-a", str(PRISTINE), str(venvs[host])], check=True)
        ws = tmp / "ws-remote"
        _toml(ws, {h: (v, h) for h, v in venvs.items()})
        env = {"HOME": str(home)}
        diff = [*PK, "-w", str(ws), "diff", "--env", "ct129", "ct200"]
        run(diff, env=env)
        time.sleep(2.2)
        ours = best(lambda: run(diff, env=env, ok=(0, 1)), RUNS)
        ssh = (f"ssh -p {sshd.port} -i {sshd.client_key} -o BatchMode=yes "
               f"-o UserKnownHostsFile={home}/.ssh/known_hosts")
        rsync = ["rsync", "-a", "-n", "--delete", "-e", ssh, f"{venvs['ct129'] / SITE_REL}/",
                 f"root@127.0.0.1:{venvs['ct200'] / SITE_REL}/"]
        peer = best(lambda: run(rsync, env={**os.environ, "HOME": str(home)}), RUNS)
        return row("`diff --env ct129 ct200` over loopback sshd", ours, "rsync -a -n (one site-packages)", peer,
                   "report")
    finally:
        sshd.stop()


if __name__ == "__main__":
    main()
