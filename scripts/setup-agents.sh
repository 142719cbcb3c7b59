#!/usr/bin/env bash
# The agents' own virtualenvs and binaries: pinned open coding agents that the
# `command` agent presets run in the sandbox, from the agents image made of them.
#
#   .agents-venv/mini-swe-agent   mini-swe-agent (the `mini` CLI, litellm)
#   .agents-venv/aider            aider-chat (the `aider` CLI, litellm)
#   .agents-venv/claude-code      @anthropic-ai/claude-code (npm; `bin/claude`)
#   .agents-venv/codex            @openai/codex (npm; `bin/codex`)
#
# One venv per agent: each pins its own litellm/openai, and they disagree.
# Every dependency is pinned too: scripts/agents-constraints/<name>.txt (a
# `pip freeze` of a working venv) is passed to pip as constraints.
# These host venvs are for trying an agent by hand: containers run the agents
# image (harness/images.py, scripts/build-images.sh), which builds the two
# Python venvs anew from wheels of the same pins and nothing of the host is
# mounted into it.
# The two npm CLIs ship native binaries (claude-code: a self-contained
# executable linked against glibc only; codex: a static musl one): npm only
# fetches them (pinned in scripts/agents-constraints/npm.txt, checked against
# the registry's integrity hashes, install scripts not run), and `bin/<exe>`
# links to the one for this CPU: scripts/build-images.sh copies that binary
# into the agents image (no node there). They need npm (Debian: apt-get
# install npm; .ci/run installs it); without it they are skipped with a
# message (RSI_REQUIRE_NPM_AGENTS=1: an error), and the agents image cannot
# be built.
# Idempotent: a venv whose stamp matches its pin is left alone.
#
#   bash scripts/setup-agents.sh            # both
#   AGENTS_VENV=/opt/agents bash scripts/setup-agents.sh
set -euo pipefail
cd "$(dirname "$0")/.."

MINI_SWE_AGENT_SPEC="mini-swe-agent==2.4.6"
AIDER_SPEC="aider-chat==0.86.2"
NPM_PINS=scripts/agents-constraints/npm.txt  # preset, npm spec, executable, binary (harness/images.py reads it too)
AGENTS_VENV="${AGENTS_VENV:-.agents-venv}"
PROJECT_PY="${PROJECT_PY:-.venv/bin/python}"

if [ ! -x "$PROJECT_PY" ]; then
  echo "setup-agents: $PROJECT_PY is missing; run 'make venv' first" >&2
  exit 1
fi
# the base interpreter behind the project's venv
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
  while read -r name spec exe binary <&3; do  # fd 3: npm never reads the pins as its stdin
    case "$name" in "" | "#"*) continue ;; esac
    binary="${binary//\{arch\}/$NPM_ARCH}"
    install_npm "$name" "$spec" "$exe" "${binary//\{march\}/$MUSL_ARCH}"
  done 3< "$NPM_PINS"
else
  echo "setup-agents: no claude-code/codex build for $(uname -m): skipped" >&2
fi
# the sandbox runs as uid 1000: everything must be readable (and dirs searchable)
chmod -R a+rX "$AGENTS_VENV"
echo "setup-agents: done in $(( $(date +%s) - start )) s ($AGENTS_VENV)"
