# Everything the demo, the tests and the benchmarks need is installed from here, never by hand.
PY        ?= python3
VENV      := .venv
BIN       := $(VENV)/bin
WHEELS    := .cache/wheels
SGLANG    := sglang==0.5.23
TESTENV   := .cache/sglang-venv
# The tests' tmp dirs on a tmpfs where there is one: each test hardlinks a 13,000-entry venv and packs a
# 120 MB baseline, which on a disk file system is most of the suite's time (in the kernel).
TESTTMP   := $(shell test -d /dev/shm && test -w /dev/shm && echo /dev/shm || echo $${TMPDIR:-/tmp})
export PK_SGLANG_VENV ?= $(CURDIR)/$(TESTENV)
export PK_WHEELS := $(CURDIR)/$(WHEELS)

.PHONY: install demo test test-needs bench sshd systemd clean gpu-bundle

install: $(BIN)/patchkeeper

$(BIN)/patchkeeper: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,ansible]'
	touch $@
	@# bytecode for our own modules, so no command pays for compiling them (even with PYTHONDONTWRITEBYTECODE)
	$(BIN)/python -m compileall -q src/patchkeeper

$(WHEELS)/.sglang:
	mkdir -p $(WHEELS)
	$(PY) -m pip download -q --no-deps $(SGLANG) -d $(WHEELS)
	touch $@

# A pristine venv holding the real sglang package (--no-deps: its dependencies are GPU-sized).
$(TESTENV)/.done: $(WHEELS)/.sglang
	rm -rf $(TESTENV)
	$(PY) -m venv $(TESTENV)
	$(TESTENV)/bin/pip install -q --no-deps $(WHEELS)/sglang-0.5.23-*.whl
	cd $(TESTENV) && find . -type f ! -name .done ! -name .files -printf '%P\t%m\t%s\t%T@\n' | sort > .files
	touch $@

# Small real wheels the audit tests install beside sglang and corrupt (markupsafe carries a .so).
AUDIT_WHEELS := markupsafe==3.0.4 six==1.17.0
$(WHEELS)/.audit:
	mkdir -p $(WHEELS)
	$(PY) -m pip download -q --no-deps --only-binary=:all: $(AUDIT_WHEELS) -d $(WHEELS)
	touch $@

# Wheels of the environment tests, in their own directory (the audit tests take every six-*.whl):
# a second six for version differences, torchcodec whose .so files need FFmpeg and libtorch
# (absent here: unresolved, and that must not count as drift).
ENV_WHEELS := six==1.16.0 torchcodec==0.17.0
$(WHEELS)/env/.done:
	mkdir -p $(WHEELS)/env
	$(PY) -m pip download -q --no-deps --only-binary=:all: $(ENV_WHEELS) -d $(WHEELS)/env
	touch $@

# Another release of six, for repair's refusal of a wheel whose version is not the installed one
# (a directory of its own, so the audit tests' six-*.whl stays one version).
OLDER_WHEELS := six==1.16.0
$(WHEELS)/older/.done:
	mkdir -p $(WHEELS)/older
	$(PY) -m pip download -q --no-deps --only-binary=:all: $(OLDER_WHEELS) -d $(WHEELS)/older
	touch $@

# Both sglang releases, for the tests of the package's life (a release installed over a state and back)
# and of porting patch sets: pip takes one version of a name per download.
PORT_WHEELS := sglang==0.5.22 sglang==0.5.23
$(WHEELS)/port/.done:
	mkdir -p $(WHEELS)/port
	for req in $(PORT_WHEELS); do $(PY) -m pip download -q --no-deps $$req -d $(WHEELS)/port || exit 1; done
	touch $@

# For `make bench` only: the real serving environment, the full `pip install sglang==0.5.23` with every
# dependency (torch 2.14.1 with its CUDA libraries, flashinfer, nvidia-*: about 11 GB, 110,000 files).
# pip, not uv: sglang pins torch==2.14.1, which pip takes from this machine's disk where it lies there.
SERVEENV := .cache/serve-venv
$(SERVEENV)/.done: $(WHEELS)/.sglang
	rm -rf $(SERVEENV)
	$(PY) -m venv $(SERVEENV)
	$(SERVEENV)/bin/pip install -q --upgrade pip
	$(SERVEENV)/bin/pip install -q $(WHEELS)/sglang-0.5.23-*.whl
	touch $@

# torch (the CPU build: pip takes 2.13.0 from this machine's local file) and transformers, for the DDTree
# lossless check (tests/test_ddtree_lossless.py runs scripts/ddtree_lossless.py in this venv).
DDTREEENV := .cache/ddtree-venv
DDTREE_PKGS := torch==2.13.0 transformers==5.24.0
export PK_DDTREE_VENV ?= $(CURDIR)/$(DDTREEENV)
$(DDTREEENV)/.done:
	rm -rf $(DDTREEENV)
	$(PY) -m venv $(DDTREEENV)
	$(DDTREEENV)/bin/pip install -q $(DDTREE_PKGS)
	touch $@

# OpenSSH's sshd for the remote-target tests; installed where it is missing.
sshd:
	@test -x /usr/sbin/sshd || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server openssh-client >/dev/null; }
	@mkdir -p /run/sshd  # sshd's privilege separation directory (the test sshd runs from a tmp config)

# Debian's systemd for the tests that compare patchkeeper's reading of a unit with systemd's own
# (`systemd-analyze verify --root=DIR` loads units in a test manager: no running systemd needed).
# After sshd: two apt-get runs side by side (make -j) would fight over dpkg's lock.
systemd: sshd
	@command -v systemd-analyze >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq systemd >/dev/null; }

# What one device call on a GPU host needs (scripts/gpu_host/run.sh, docs/gpu-host.md): patchkeeper and its
# dependencies as wheels for the host's Python (3.12, x86-64), the scripts, and the ddtree patch that makes ddtree_utils.py.
GPU_PY    := 3.12
GPU_DEPS  := click packaging unidiff blake3 gitpython gitdb smmap paramiko bcrypt cryptography pynacl cffi pycparser
gpu-bundle: install
	rm -rf .gpu && mkdir -p .gpu/whl
	$(BIN)/pip wheel -q --no-deps -w .gpu/whl .
	$(BIN)/pip download -q --no-deps --only-binary=:all: --python-version $(GPU_PY) --implementation cp \
	  --platform manylinux_2_28_x86_64 --platform manylinux_2_26_x86_64 --platform manylinux_2_17_x86_64 \
	  --platform manylinux2014_x86_64 -d .gpu/whl $(GPU_DEPS)
	cp -r scripts/gpu_host scripts/ddtree_lossless.py patchsets/ddtree/0004-ddtree-utils.patch .gpu/

# The demo target is a venv of its own (scripts/demo.sh), installed from the cached wheel.
demo: install $(WHEELS)/.sglang
	PY=$(PY) bash scripts/demo.sh

# What the tests need, built side by side (-j: the downloads and venvs are independent). On a fresh
# 2-core machine, set-up and mypy took 2 min 39 s one after another, 1 min 48 s side by side.
TEST_NEEDS := install $(TESTENV)/.done $(WHEELS)/.audit $(WHEELS)/env/.done $(WHEELS)/older/.done \
              $(WHEELS)/port/.done $(DDTREEENV)/.done sshd systemd
test-needs: $(TEST_NEEDS)

test:
	$(MAKE) -j4 --no-print-directory test-needs
	$(BIN)/ruff check .  # [tool.ruff] in pyproject.toml: the house rules (imports sorted, pyflakes, bugbear)
	$(BIN)/ruff format --check .
	$(BIN)/mypy  # [tool.mypy] in pyproject.toml: strict on host/, the engine and changes.py
	TMPDIR=$(TESTTMP) $(BIN)/pytest -q -n 6 --dist worksteal --durations=15  # 6 workers on 2 cores: the tests wait on sshd, servers and fsync too (-n 4 left 20% of the CPU idle); a worker that runs out takes tests queued for another

bench: install $(TESTENV)/.done $(SERVEENV)/.done sshd
	@command -v rsync >/dev/null && command -v b3sum >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rsync b3sum >/dev/null; }
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) .cache .demo
