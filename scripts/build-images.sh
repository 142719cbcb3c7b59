#!/usr/bin/env bash
# Build the images the sandbox's containers run (harness/images.py), once:
#
#   rsi-bot/python:<digest>   the base image (scripts/setup-docker.sh) + Debian's
#                             Python 3.11 (.debs from apt-get download) + rsi-bot's
#                             runtime dependencies with torch (wheels from pip
#                             download on this host, at the venv's versions)
#   rsi-bot/agents:<digest>   + the agent presets' venvs (pip wheel of
#                             scripts/agents-constraints/*.txt on this host)
#                             and claude-code's and codex's native binaries
#                             (scripts/agents-constraints/npm.txt), copied from
#                             scripts/setup-agents.sh's npm install
#                             ($RSI_AGENTS_VENV, else .agents-venv: run
#                             `make agents` first)
#   rsi-bot/runtime:<digest>  + this checkout's packages (seconds; also made on
#                             first use after a change)
#
# Each tag is a digest of its inputs: an unchanged input finds its image and
# builds nothing. The builds run with --network none: no registry is reached
# from inside a container. Fetched .debs and wheels are kept in
# $RSI_IMAGE_CACHE (default $RSI_CI_CACHE/images, /var/cache/rsi-ci/images).
# Needs the project venv (make venv) and the base image.
#
#   bash scripts/build-images.sh        # prints the runtime image's tag
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PROJECT_PY:-.venv/bin/python}"
if [ ! -x "$PY" ]; then
  echo "build-images: $PY is missing; run 'make venv' first" >&2
  exit 1
fi
start=$(date +%s)
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m harness.images build
echo "build-images: done in $(( $(date +%s) - start )) s" >&2
