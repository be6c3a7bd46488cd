# Everything the demo, the tests and the benchmarks need is installed from here, never by hand.
PY        ?= python3
VENV      := .venv
BIN       := $(VENV)/bin
WHEELS    := .cache/wheels
SGLANG    := sglang==0.5.23
TESTENV   := .cache/sglang-venv
export PK_SGLANG_VENV ?= $(CURDIR)/$(TESTENV)
export PK_WHEELS := $(CURDIR)/$(WHEELS)

.PHONY: install demo test bench sshd clean

install: $(BIN)/patchkeeper

$(BIN)/patchkeeper: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $@

$(WHEELS)/.sglang:
	mkdir -p $(WHEELS)
	$(PY) -m pip download -q --no-deps $(SGLANG) -d $(WHEELS)
	touch $@

# A pristine venv holding the real sglang package (--no-deps: its dependencies are GPU-sized).
$(TESTENV)/.done: $(WHEELS)/.sglang
	rm -rf $(TESTENV)
	$(PY) -m venv $(TESTENV)
	$(TESTENV)/bin/pip install -q --no-deps $(WHEELS)/sglang-0.5.23-*.whl
	touch $@

# OpenSSH's sshd for the remote-target tests; installed where it is missing.
sshd:
	@test -x /usr/sbin/sshd || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssh-server openssh-client >/dev/null; }
	@mkdir -p /run/sshd  # sshd's privilege separation directory (the test sshd runs from a tmp config)

demo: install $(TESTENV)/.done
	bash scripts/demo.sh

test: install $(TESTENV)/.done sshd
	$(BIN)/pytest -q -n 2

bench: install $(TESTENV)/.done sshd
	@command -v rsync >/dev/null && command -v b3sum >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rsync b3sum >/dev/null; }
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) .cache .demo
