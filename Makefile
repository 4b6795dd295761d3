# slurmtower: `make run` starts the service (on a local Slurm cluster if none is configured),
# `make test` runs the whole test suite against the local cluster. Both work on a fresh
# Debian 12 machine as root.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv run test lint bench dist cluster-up cluster-down clean slurm-releases docs screenshots

$(STAMP): pyproject.toml
	@command -v $(PY) >/dev/null || (apt-get update -qq && apt-get install -y -q python3 python3-venv)
	@$(PY) -c 'import venv, ensurepip' 2>/dev/null || (apt-get update -qq && apt-get install -y -q python3-venv)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

cluster-up: $(STAMP)
	$(BIN)/slurmtower devcluster up

cluster-down: $(STAMP)
	$(BIN)/slurmtower devcluster down

# Run the service. With no Slurm configured (no SLURM_CONF, no /etc/slurm/slurm.conf), bring up
# the local cluster and use it; once it answers, say where to go (scripts/run.sh).
run: $(STAMP)
	@bash scripts/run.sh

test: $(STAMP)
	bash scripts/test.sh

# Slurm 23.11, 24.11, 25.11 and 26.05 built from SchedMD's archives in ../shared/slurm/ into
# /opt/slurm-<series> (checksums first; a second run does nothing): `make test` then runs the
# release suites live on each. `make slurm-releases SERIES=26.05` builds one.
slurm-releases:
	bash scripts/slurm-releases.sh $(SERIES)

# The documentation site (mkdocs.yml) into build/site: docs/ plus the reference pages generated
# from the code at build time (scripts/docs_reference.py); strict: a broken link, anchor or
# reference fails it. `make test` builds it too.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
	@echo "the site: build/site/index.html"

# The dashboard's screenshots in docs/screenshots/, taken from the real dashboard on the local
# cluster with Debian's Chromium (scripts/screenshots.py; commit the PNGs it writes).
screenshots: $(STAMP)
	command -v chromium >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium
	$(BIN)/slurmtower devcluster up
	eval "$$($(BIN)/slurmtower devcluster env)" && $(BIN)/python scripts/screenshots.py

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy

bench: $(STAMP)
	command -v wrk >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q wrk || true
	$(BIN)/slurmtower devcluster up
	bash scripts/services.sh
	eval "$$($(BIN)/slurmtower devcluster env)" && $(BIN)/python bench/actions.py && \
	  $(BIN)/python bench/events.py && $(BIN)/python bench/api.py && $(BIN)/python bench/api.py --replicas 2 && \
	  $(BIN)/python bench/snapshot_codec.py --redis redis://127.0.0.1:6379/0 && \
	  $(BIN)/python bench/history.py --devcluster

# A wheel and an sdist in dist/, for a site to install without a clone (docs/how-to/install.md).
# The version is the git tag's (pyproject.toml's [tool.hatch.version]).
dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --installer uv --outdir dist .
	@ls -l dist

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache dist

# The container image (Containerfile) with Debian's podman: docs/how-to/install.md, "A container image". Takes
# minutes; `make test` checks its steps without building it.
.PHONY: image
image:
	SLURM_CLIENT_VERSION=$(SLURM_CLIENT_VERSION) SLURMTOWER_UID=$(SLURMTOWER_UID) IMAGE=$(IMAGE) BASE=$(BASE) \
	  bash scripts/image.sh
