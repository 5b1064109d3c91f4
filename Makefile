# raspi-tf: the commands of the README. `make help` lists them.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export PATH := $(abspath $(BIN)):$(PATH)
export ANSIBLE_FORCE_COLOR ?= 1

.PHONY: help install train test checks lint unit integration images all-images nodes arm64 clean

help: ## list the commands
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

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

images: ## build the node image the container tests boot (needs a Docker engine)
	molecule/images/build.sh amd64

nodes: install images ## node tests in Docker: refused nodes, then molecule's 3-node cluster
	pytest -m docker
	molecule test -s cluster

arm64: install images ## arm64 nodes under qemu emulation, and an arm64 + x86_64 cluster (needs binfmt_misc)
	molecule/images/build.sh arm64
	molecule test -s arm64

test: install ## every test (nodes and arm64 need a Docker engine and binfmt: .ci/run sets them up)
	@echo "== lint, unit and integration, with the node images building beside them"
	@echo "== (each one's output shows when it ends)"
	$(MAKE) --no-print-directory --output-sync=target -j2 checks all-images
	@echo "== nodes and arm64 side by side (each one's output shows when it ends)"
	$(MAKE) --no-print-directory --output-sync=target -j2 nodes arm64

checks: install ## lint, unit and integration, one after the other
	$(MAKE) --no-print-directory lint
	$(MAKE) --no-print-directory unit
	$(MAKE) --no-print-directory integration

all-images: ## build both node images (x86_64, then arm64 under emulation)
	molecule/images/build.sh amd64
	molecule/images/build.sh arm64

clean: ## remove the venv and caches (runs/ stays: it holds your models)
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache .mypy_cache
