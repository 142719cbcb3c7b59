# rsi-bot: set-up and entry points. Every target does its own set-up and is
# idempotent: on a fresh machine `make test` and `make demo` just work.
#
#   make typecheck     mypy over bot/ harness/ verifier/ kernels/ ([tool.mypy] in
#                      pyproject.toml; strict on the seams); `make test` runs it first
#   make test          the whole test suite (Docker tests need the engine:
#                      run scripts/setup-docker.sh, or .ci/run which does it):
#                      in three parts (the markers: tests/conftest.py): the tests
#                      not marked serial with TEST_WORKERS pytest-xdist workers (under
#                      coverage, with a floor: [tool.coverage] in pyproject.toml), then
#                      the serial ones (decisions on measured time, Docker) one at a
#                      time; then the parallel_docker ones (tests/adversarial and the
#                      Docker files whose outcomes rest on no measured time) with
#                      ADV_WORKERS workers (they wait more than they compute: see
#                      tests/adversarial/README.md). PYTEST_ARGS go to all three
#                      (for one file or -k, run .venv/bin/python -m pytest).
#   make demo          the main job: the loop on examples/tiny-tts
#                      (NEIGHBOUR=1: with a background process keeping one core 50% busy)
#   make bench         the benchmark tables (verifier quality, harness
#                      overhead, webhook load, kernels)
#   make dist          a wheel of this checkout in dist/ (docs/getting-started.md)
#   make agents        the pinned agents (mini-swe-agent, aider venvs;
#                      claude-code, codex from npm) that scripts/build-images.sh
#                      builds the agents image from (nothing of them is mounted)
#
# TORCH_SPEC overrides the torch pin for an accelerator, e.g.
#   make test TORCH_SPEC="torch==2.5.1+cu124" PIP_EXTRA="--index-url ..."

PYTHON      ?= python3
VENV        ?= .venv
TORCH_SPEC  ?= torch==2.13.0
PIP_EXTRA   ?=
PY          := $(VENV)/bin/python
PIP         := $(VENV)/bin/pip
STAMP       := $(VENV)/.rsi-installed
PYTEST_ARGS ?=
ADV_WORKERS ?= 3
TEST_WORKERS ?= 3

.PHONY: venv typecheck test demo bench docker-image agents task-md-example lint clean dist

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q $(PIP_EXTRA) "$(TORCH_SPEC)"
	$(PIP) install -q $(PIP_EXTRA) -e ".[dev,postgres]" "$(TORCH_SPEC)"
	touch $(STAMP)

# A wheel of this checkout (dist/rsi_bot-<version>-py3-none-any.whl): what
# generated workflows install through the repository variable RSI_INSTALL.
dist: venv
	rm -rf dist build
	$(PIP) wheel --quiet --no-deps --no-build-isolation -w dist .
	@ls dist/*.whl

docker-image:
	bash scripts/setup-docker.sh

agents: venv
	bash scripts/setup-agents.sh

task-md-example: venv
	$(PY) -m harness.agents.taskmd examples/tiny-tts --out docs/task-md-example.md

# the type checker first: a type error fails in seconds, before the long suite
typecheck: venv
	$(PY) -m mypy

# Coverage (pytest-cov) on the tests not marked serial, the whole of them only
# (no PYTEST_ARGS: a subset covers less), failing under the floor
# ([tool.coverage.report] fail_under). Never on the serial ones: they decide on
# measured time, and a tracer slows what they time; Docker's run in containers
# coverage does not see.
COV_ARGS = $(if $(strip $(PYTEST_ARGS)),,--cov --cov-report=term)

# exit status 5 (no test collected: PYTEST_ARGS selected none in that half) is not a failure
test: venv typecheck
	$(PY) -m pytest $(PYTEST_ARGS) --durations=15 -m "not serial and not parallel_docker" -n $(TEST_WORKERS) --dist loadgroup $(COV_ARGS) || [ $$? -eq 5 ]
	$(PY) -m pytest $(PYTEST_ARGS) --durations=25 -m "serial and not parallel_docker" || [ $$? -eq 5 ]
	$(PY) -m pytest $(PYTEST_ARGS) --durations=15 -m parallel_docker -n $(ADV_WORKERS) --dist loadgroup || [ $$? -eq 5 ]

demo: venv docker-image
	$(PY) -m harness.demo $(if $(NEIGHBOUR),--neighbour)

bench: venv
	$(PY) benchmarks/verifier_quality.py
	$(PY) benchmarks/harness_overhead.py
	$(PY) benchmarks/webhook_load.py
	$(PY) -m kernels.bench

lint: venv
	$(PY) -m ruff check bot harness verifier kernels tests benchmarks

clean:
	rm -rf $(VENV) .agents-venv rsi-demo .pytest_cache
