#!/usr/bin/env bash
# Run a command without the caller's open descriptors: every descriptor above
# 2 (stdin, stdout and stderr stay; redirect them as needed) is closed, then
# the command is exec'd. For the daemons our scripts start (dockerd,
# PostgreSQL): a daemon keeps what it inherits for its whole life, so a lock
# the calling script holds on a descriptor would stay held by the daemon, and
# a pipe the caller reads would never see its end.
#
#   bash scripts/without-fds.sh CMD [ARG...]
set -euo pipefail
if [ "$#" -eq 0 ]; then
  echo "usage: without-fds.sh CMD [ARG...]" >&2
  exit 2
fi
# one compound command, parsed whole before it runs: closing bash's own
# descriptor of this script (255) cannot cut it short
{
  for fd in /proc/$$/fd/*; do
    n="${fd##*/}"
    if [ "$n" -gt 2 ] 2>/dev/null; then eval "exec $n>&-" 2>/dev/null || true; fi
  done
  exec "$@"
}
