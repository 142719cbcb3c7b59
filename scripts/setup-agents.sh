#!/usr/bin/env bash
# The agents' own virtualenvs: pinned open coding agents that the `command`
# agent presets run inside the sandbox (mounted read-only at the same path).
#
#   .agents-venv/mini-swe-agent   mini-swe-agent (the `mini` CLI, litellm)
#   .agents-venv/aider            aider-chat (the `aider` CLI, litellm)
#   .agents-venv/claude-code      @anthropic-ai/claude-code (npm; `bin/claude`)
#   .agents-venv/codex            @openai/codex (npm; `bin/codex`)
#
# One venv per agent: each pins its own litellm/openai, and they disagree.
# Every dependency is pinned too: scripts/agents-constraints/<name>.txt (a
# `pip freeze` of a working venv) is passed to pip as constraints.
# Both are made with the SAME base Python as the project's venv (the sandbox
# mounts that Python's prefix read-only; the base image has no Python).
# The two npm CLIs ship native binaries (claude-code: a self-contained
# executable linked against glibc only; codex: a static musl one): npm only
# fetches them (pinned, checked against the registry's integrity hashes,
# install scripts not run), and `bin/<exe>` links to the one for this CPU, so
# the sandbox needs no node. They need npm (Debian: apt-get install npm);
# without it they are skipped with a message (RSI_REQUIRE_NPM_AGENTS=1: an error).
# Idempotent: a venv whose stamp matches its pin is left alone.
#
#   bash scripts/setup-agents.sh            # both
#   AGENTS_VENV=/opt/agents bash scripts/setup-agents.sh
set -euo pipefail
cd "$(dirname "$0")/.."

MINI_SWE_AGENT_SPEC="mini-swe-agent==2.4.6"
AIDER_SPEC="aider-chat==0.86.2"
CLAUDE_CODE_SPEC="@anthropic-ai/claude-code@2.1.332"
CODEX_SPEC="@openai/codex@0.171.0"
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

install_npm() {  # name spec executable path-of-the-binary-in-node_modules
  local dir="$AGENTS_VENV/$1" spec="$2" exe="$3" binary="$4"
  local stamp="$spec $binary"
  if [ -f "$dir/.rsi-installed" ] && [ "$(cat "$dir/.rsi-installed")" = "$stamp" ] && [ -x "$dir/bin/$exe" ]; then
    echo "setup-agents: $spec already in $dir"
    return
  fi
  if ! command -v npm >/dev/null; then
    echo "setup-agents: npm is missing: $spec skipped (Debian: apt-get install npm)" >&2
    [ "${RSI_REQUIRE_NPM_AGENTS:-0}" != 1 ] || exit 1
    return
  fi
  echo "setup-agents: installing $spec into $dir"
  rm -rf "$dir"
  mkdir -p "$dir/bin"
  npm install --prefix "$dir" --no-audit --no-fund --ignore-scripts --loglevel=error "$spec"
  [ -x "$dir/node_modules/$binary" ] || { echo "setup-agents: $spec has no $binary" >&2; exit 1; }
  ln -s "../node_modules/$binary" "$dir/bin/$exe"
  "$dir/bin/$exe" --version >/dev/null 2>&1 </dev/null || { echo "setup-agents: $dir/bin/$exe --version failed" >&2; exit 1; }
  echo "$stamp" > "$dir/.rsi-installed"
}

case "$(uname -m)" in
  x86_64) NPM_ARCH=x64 MUSL_ARCH=x86_64 ;;
  aarch64 | arm64) NPM_ARCH=arm64 MUSL_ARCH=aarch64 ;;
  *) NPM_ARCH="" ;;
esac

start=$(date +%s)
mkdir -p "$AGENTS_VENV"
install_one mini-swe-agent "$MINI_SWE_AGENT_SPEC" mini
install_one aider "$AIDER_SPEC" aider
if [ -n "$NPM_ARCH" ]; then
  install_npm claude-code "$CLAUDE_CODE_SPEC" claude "@anthropic-ai/claude-code-linux-$NPM_ARCH/claude"
  install_npm codex "$CODEX_SPEC" codex "@openai/codex-linux-$NPM_ARCH/vendor/$MUSL_ARCH-unknown-linux-musl/bin/codex"
else
  echo "setup-agents: no claude-code/codex build for $(uname -m): skipped" >&2
fi
# the sandbox runs as uid 1000: everything must be readable (and dirs searchable)
chmod -R a+rX "$AGENTS_VENV"
echo "setup-agents: done in $(( $(date +%s) - start )) s ($AGENTS_VENV)"
