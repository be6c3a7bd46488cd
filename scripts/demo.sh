#!/usr/bin/env bash
# The walk-through of the README on a fresh demo target: apply ddtree, switch to nextn, roll back.
set -euo pipefail
cd "$(dirname "$0")/.."
PK=.venv/bin/patchkeeper
WHEELS="${PK_WHEELS:-.cache/wheels}"
rm -rf .demo snapshots/local
mkdir -p .demo/systemd
cp demo/sglang-qwen.service .demo/systemd/sglang-qwen.service
# the demo target: a venv of its own (its own pip; no file shared with the venvs the tests copy from),
# with sglang installed from the cached wheel, as a user would install it
"${PY:-python3}" -m venv .demo/venv
.demo/venv/bin/pip install -q --no-deps --no-index --no-compile "$WHEELS"/sglang-0.5.23-*.whl
site=$(.demo/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
digest() { (cd "$site" && find sglang -name __pycache__ -prune -o -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum); }
installed=$(digest)
step() { printf '\n$ %s\n' "$*"; "$@"; }
step $PK list
step $PK apply ddtree --dry-run
step $PK apply ddtree
step $PK status
step $PK apply nextn
step $PK rollback --to baseline
step $PK status
step $PK log
[ "$(digest)" = "$installed" ]
cmp .demo/systemd/sglang-qwen.service demo/sglang-qwen.service  # the host's unit: never written
[ ! -e .demo/systemd/sglang-qwen.service.d/50-patchkeeper.conf ]  # the drop-in: gone with the rollback
printf '\ndemo done: the target is byte for byte back at its baseline\n'
printf 'run it yourself: .venv/bin/patchkeeper status (or `source .venv/bin/activate`, then patchkeeper ...)\n'
