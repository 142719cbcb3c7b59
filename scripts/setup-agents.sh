#!/usr/bin/env bash
# The agents' own virtualenvs: pinned open coding agents that the `command`
# agent presets run inside the sandbox (mounted read-only at the same path).
#
#   .agents-venv/mini-swe-agent   mini-swe-agent (the `mini` CLI, litellm)
#   .agents-venv/aider            aider-chat (the `aider` CLI, litellm)
#
# One venv per agent: each pins its own litellm/openai, and they disagree.
# Every dependency is pinned too: scripts/agents-constraints/<name>.txt (a
# `pip freeze` of a working venv) is passed to pip as constraints.
# Both are made with the SAME base Python as the project's venv (the sandbox
# mounts that Python's prefix read-only; the base image has no Python).
# Idempotent: a venv whose stamp matches its pin is left alone.
#
#   bash scripts/setup-agents.sh            # both
#   AGENTS_VENV=/opt/agents bash scripts/setup-agents.sh
set -euo pipefail
cd "$(dirname "$0")/.."

MINI_SWE_AGENT_SPEC="mini-swe-agent==2.4.6"
AIDER_SPEC="aider-chat==0.86.2"
AGENTS_VENV="${AGENTS_VENV:-.agents-venv}"
PROJECT_PY="${PROJECT_PY:-.venv/bin/python}"

if [ ! -x "$PROJECT_PY" ]; then
  echo "setup-agents: $PROJECT_PY is missing; run 'make venv' first" >&2
  exit 1
fi
# the base interpreter behind the project's venv (what the sandbox mounts)
BASE_PY="$("$PROJECT_PY" -c 'import sys; print(getattr(sys, "_base_executable", sys.executable))')"
BASE_VERSION="$("$BASE_PY" -c 'import sys; print(sys.version.split()[0])')"

install_one() {  # name spec executable
  local dir="$AGENTS_VENV/$1" spec="$2" exe="$3"
  local constraints="scripts/agents-constraints/$1.txt"
  # the pin, its constraints and the base Python it was made with (a venv
  # outlives the clone in .ci/run's cache: a new interpreter must rebuild it)
  local stamp="$spec $(sha256sum "$constraints" | cut -c1-16) $BASE_PY $BASE_VERSION"
  if [ -f "$dir/.rsi-installed" ] && [ "$(cat "$dir/.rsi-installed")" = "$stamp" ] && [ -x "$dir/bin/$exe" ]; then
    echo "setup-agents: $spec already in $dir"
    return
  fi
  echo "setup-agents: installing $spec into $dir"
  rm -rf "$dir"
  "$BASE_PY" -m venv "$dir"
  "$dir/bin/pip" install -q --disable-pip-version-check --no-input -c "$constraints" "$spec"
  "$dir/bin/$exe" --help >/dev/null 2>&1 </dev/null || { echo "setup-agents: $dir/bin/$exe --help failed" >&2; exit 1; }
  echo "$stamp" > "$dir/.rsi-installed"
}

start=$(date +%s)
mkdir -p "$AGENTS_VENV"
install_one mini-swe-agent "$MINI_SWE_AGENT_SPEC" mini
install_one aider "$AIDER_SPEC" aider
# the sandbox runs as uid 1000: everything must be readable (and dirs searchable)
chmod -R a+rX "$AGENTS_VENV"
echo "setup-agents: done in $(( $(date +%s) - start )) s ($AGENTS_VENV)"
