# raspi-tf: the commands of the README. `make help` lists them.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export PATH := $(abspath $(BIN)):$(PATH)
export ANSIBLE_FORCE_COLOR ?= 1

.PHONY: help install train test lint unit integration images nodes arm64 bench docs clean

help: ## list the commands
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(BIN)/ansible-playbook: requirements.txt requirements-tf-keras.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install -r requirements.txt
	$(BIN)/python -m pip install --no-deps -r requirements-tf-keras.txt
	@touch $@

install: $(BIN)/ansible-playbook ## build .venv with everything pinned (once)

train: install ## provision the local cluster and train mnist_cnn on it
	ansible-playbook site.yml
	ansible-playbook train.yml -e model=mnist_cnn

lint: install ## ruff, mypy, ansible-lint and playbook syntax checks
	ruff check .
	ruff format --check .
	mypy
	ansible-lint
	for p in site.yml train.yml playbooks/*.yml; do ansible-playbook --syntax-check $$p || exit 1; done

unit: install ## fast tests: cluster rules, registry, data, rendered TF_CONFIGs
	pytest -m "not integration and not docker"

integration: install ## real local runs through the playbooks (minutes)
	pytest -m integration

# molecule prints its teardown after the verifier's results, so a CI log's tail
# would show "Verifier tests failed" and not which test: a failed scenario ends by
# repeating its failed tests, their assertion lines (pytest's E lines) and
# failed tasks, at most 30 lines (CI shows a log's last few dozen); the whole
# log stays in $(MOLECULE_LOGS).
MOLECULE_LOGS ?= $(or $(TMPDIR),/tmp)/raspi-tf-molecule
define molecule_test
	@mkdir -p $(MOLECULE_LOGS)
	set -o pipefail; COLUMNS=$${COLUMNS:-200} molecule test -s $(1) 2>&1 | tee $(MOLECULE_LOGS)/$(1).log || { \
	  echo "== molecule scenario $(1) failed; its failure lines (whole log: $(MOLECULE_LOGS)/$(1).log):"; \
	  grep -aE '(FAILED|ERROR) tests/|[^[:alnum:]]E {3,}[^ ]|fatal: \[|failed=[1-9]' $(MOLECULE_LOGS)/$(1).log \
	    | cut -c1-400 | tail -n 30; \
	  exit 1; }
endef

images: ## build the node image the container tests boot (needs a Docker engine)
	molecule/images/build.sh amd64

nodes: install images ## node tests in Docker: refused nodes, then molecule's 3-node cluster
	pytest -m docker
	$(call molecule_test,cluster)

arm64: install images ## arm64 nodes under qemu emulation, and an arm64 + x86_64 cluster (needs binfmt_misc)
	molecule/images/build.sh arm64
	$(call molecule_test,arm64)

# The benchmark's cases go into runs/bench-$(BENCH_ID)/, one folder each.
# Fixed once when make starts (:=), so every case of one bench goes to one
# folder: a recursive ?= would run date again in the recipe, after the images step.
ifndef BENCH_ID
BENCH_ID := $(shell date -u +%Y%m%dT%H%M%SZ)
endif
BENCH_DIR := $(abspath runs)/bench-$(BENCH_ID)
BENCH_RUN = ansible-playbook train.yml -e model=mnist_cnn -e training_run_runs_dir=$(BENCH_DIR)

bench: install images ## measure speed-up, all-reduce, time to accuracy and own data on Pi-shaped nodes (~50 min, idle machine)
	python -m training machine --out $(BENCH_DIR)/machine.json
	python -m training data-bench --photos $(BENCH_DIR)/photos --out $(BENCH_DIR)/data.json
	ansible-playbook site.yml
	$(BENCH_RUN) -e training_run_id=mnist_cnn-local-2workers
	$(BENCH_RUN) -e training_run_id=mnist_cnn-local-1worker -e batch_size=128 \
		-e '{"tf_cluster_ports": {"worker": [23456], "ps": [23458], "chief": [23459]}}'
	RASPI_TF_BENCH_ID=$(BENCH_ID) molecule test -s bench
	python -m training bench --dir $(BENCH_DIR) --docs docs/benchmarks

test: lint unit integration nodes arm64 ## every test CI runs (nodes and arm64 need a Docker engine: .ci/run starts one)

docs: install ## regenerate docs/variables.md from the roles' meta/argument_specs.yml
	python docs/variables.py

clean: ## remove the venv and caches (runs/ stays: it holds your models)
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache .mypy_cache
