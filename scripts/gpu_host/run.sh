#!/bin/bash
# One device call on a GPU host (docs/gpu-host.md): the host's real nvidia-smi / ldconfig outputs, patchkeeper
# env and audit of its CUDA venv as a local target, audit timings against a sha256 floor, the native section
# against the real loader, a one-line transformers patch set applied / audited / rolled back byte for byte,
# and DDTree decoding checked lossless on the GPU. Usage: run.sh BUNDLE (made by `make gpu-bundle`); writes $OUT.
set -u
B=$(cd "${1:?bundle dir}" && pwd)
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"; M=/tmp/gpu-more; mkdir -p "$M"  # packed into $OUT/more.tar.gz after each step: at most 8 files come back
pack() { tar -C "$M" -czf "$OUT/more.tar.gz" .; }
exec > >(tee -a "$OUT/report.txt") 2>&1
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
step() { pack 2>/dev/null; echo; echo "=== $* ($(date -u +%T))"; }
timed() { local t0 t1 rc; t0=$(date +%s.%N); "$@"; rc=$?; t1=$(date +%s.%N)
          echo "[timed: rc=$rc $(python3 -c "print(f'{$t1-$t0:.3f}')") s] $*" >&2; return $rc; }
drop_caches() { [ -n "${NO_DROP:-}" ] && return; sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null && echo "(page cache dropped)" || echo "(could not drop the page cache)"; }

step "host facts"
nvidia-smi -q -x > "$OUT/nvidia-smi-q.xml"; echo "nvidia-smi -q -x rc=$?"
nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,memory.used,pci.bus_id,compute_cap,temperature.gpu,power.draw,clocks_event_reasons.active --format=csv,noheader,nounits > "$OUT/nvidia-smi-query.csv"; echo "query rc=$?"
nvidia-smi -L > "$OUT/nvidia-smi-L.txt"; ldconfig -p > "$OUT/ldconfig-p.txt"
nvidia-smi > "$M/nvidia-smi.txt"; cat /proc/driver/nvidia/version > "$M/proc-driver-nvidia-version.txt"
{ cat /etc/os-release; uname -r; } > "$M/os-release.txt"; dmesg 2>&1 | grep -iE 'NVRM|Xid' | tail -20 > "$M/dmesg-nvrm.txt"
cat "$OUT/nvidia-smi-L.txt" "$OUT/nvidia-smi-query.csv" "$M/proc-driver-nvidia-version.txt"; uname -r; nproc; free -g | head -2
python3 -m pip list 2>/dev/null > "$M/pip-list.txt"; grep -iE '^(torch|transformers|triton|numpy|jax) ' "$M/pip-list.txt"

step "patchkeeper in a venv of its own (wheels), the CUDA venv as a local target"
PYV=$(python3 -c 'import sys; print(f"python{sys.version_info[0]}.{sys.version_info[1]}")')
TPY=$(python3 -c 'import sys; print(sys.executable)')
python3 -m venv --without-pip /tmp/pkvenv && python3 -m pip install -q --no-index --no-deps --no-compile \
  --target "/tmp/pkvenv/lib/$PYV/site-packages" "$B"/whl/*.whl || { echo "patchkeeper install failed"; }
PK() { timeout 300 /tmp/pkvenv/bin/python -m patchkeeper --workspace /tmp/ws "$@"; }
mkdir -p /tmp/ws/patchsets
printf 'default_target = "cuda"\n\n[targets.cuda]\npython = "%s"\npackage = "transformers"\nstate_dir = "/tmp/pk-state"\n' "$TPY" > /tmp/ws/patchkeeper.toml
cat /tmp/ws/patchkeeper.toml

step "env"
timed PK env | tee "$M/env.txt"
timed PK env --json > "$OUT/env.json"
SITES=$(python3 -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1]))["where"]["sites"]))' "$OUT/env.json")
SITE=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "sites: $SITES"; du -sh $SITES

step "audit timings: sha256 floor (one process per CPU) and patchkeeper audit, cold and warm"
drop_caches; timed python3 "$B/gpu_host/sha256_floor.py" /tmp/before.json $SITES
drop_caches; timed PK audit | tee "$M/audit-first.txt"
timed PK audit --json > "$OUT/audit.json"
timed PK audit | tee "$M/audit-warm.txt"
timed python3 "$B/gpu_host/sha256_floor.py" /tmp/before-warm.json $SITES

step "native section against the loader"
timed timeout 150 python3 "$B/gpu_host/native_load.py" "$OUT/env.json" torch > "$M/native-load.json"; head -c 4000 "$M/native-load.json"; echo

step "a one-line patch set over transformers: apply, audit, roll back, byte for byte"
MOD=$(python3 "$B/gpu_host/one_line_patchset.py" /tmp/ws "$SITE"); cat /tmp/ws/patchsets/tf-one-line/*.patch
PK list; timed PK apply tf-one-line; PK status
grep -c "patched by patchkeeper" "$SITE/$MOD"
timed PK audit; timed PK rollback --to baseline; timed PK audit; PK log | head -5
timed python3 "$B/gpu_host/sha256_floor.py" /tmp/after.json $SITES
python3 - /tmp/before.json /tmp/after.json <<'EOF'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
diff = sorted(p for p in set(a) | set(b) if a.get(p) != b.get(p))
print(f"byte for byte: {len(a)} files before, {len(b)} after, {len(diff)} differ (size, mode or sha256)", diff[:20])
EOF

step "DDTree lossless on the GPU"
/tmp/pkvenv/bin/python -c 'import sys; from patchkeeper.patchset.patching import parse, apply
fp, = parse(open(sys.argv[1]).read(), "0004"); open("/tmp/ddtree_utils.py", "wb").write(apply(fp, None, "0004").data)' \
  "$B/0004-ddtree-utils.patch" && sha256sum /tmp/ddtree_utils.py
DD="python3 -W ignore $B/ddtree_lossless.py --utils /tmp/ddtree_utils.py --device ${DD_DEVICE:-cuda}"
SIZE=${DD_SIZE:---vocab 32000 --hidden 1024 --layers 8 --heads 16}; S=${DD_SECONDS:-120}
timed timeout $((S + 150)) $DD --dtype float64 $SIZE --init 0.1 --noise ${DD_NOISE:-0.005} --prompts 64 \
  --prompt-len 32 --new-tokens 64 --depth 8 --topk 8 --budgets 1,4,16,64,256 --deadline $S --json "$M/ddtree-fp64.json" 2>&1 | tail -60
timed timeout $((S + 150)) $DD --dtype float64 $SIZE --init 0.1 --noise ${DD_NOISE:-0.005} --prompts 8 \
  --prompt-len 32 --new-tokens 64 --depth 8 --topk 8 --budgets 16,64 --mask causal --deadline $((S / 5)) --json "$M/ddtree-broken-mask.json" 2>&1 | grep -E '"(lossless|mismatched|budget)"'
timed timeout $((S + 150)) $DD --dtype float32 $SIZE --init 0.1 --noise ${DD_NOISE:-0.005} --prompts 64 \
  --prompt-len 32 --new-tokens 64 --depth 8 --topk 8 --budgets 4,64 --deadline $((S * 3 / 10)) --json "$M/ddtree-fp32.json" 2>&1 | grep -E '"(lossless|mismatched|budget|mean_accepted_length|prompts)"'

step "done"
pack; ls -la "$OUT"; tar -tzf "$OUT/more.tar.gz"
