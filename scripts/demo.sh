#!/usr/bin/env bash
# The walk-through of the README on a fresh demo target: apply ddtree, switch to nextn, roll back.
set -euo pipefail
cd "$(dirname "$0")/.."
PK=.venv/bin/patchkeeper
rm -rf .demo snapshots/local
mkdir -p .demo/systemd
cp demo/sglang-qwen.service .demo/systemd/sglang-qwen.service
# the demo target: a copy of the pristine sglang venv (hardlinks: patchkeeper never writes into a file)
cp -al "${PK_SGLANG_VENV:-.cache/sglang-venv}" .demo/venv
step() { printf '\n$ %s\n' "$*"; "$@"; }
step $PK list
step $PK apply ddtree --dry-run
step $PK apply ddtree
step $PK status
step $PK apply nextn
step $PK rollback --to baseline
step $PK status
step $PK log
spec=.demo/venv/lib/python3.11/site-packages/sglang/srt/speculative/spec_info.py
cmp "$spec" "${PK_SGLANG_VENV:-.cache/sglang-venv}/lib/python3.11/site-packages/sglang/srt/speculative/spec_info.py"
cmp .demo/systemd/sglang-qwen.service demo/sglang-qwen.service
printf '\ndemo done: the target is byte for byte back at its baseline\n'
