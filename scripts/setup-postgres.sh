#!/usr/bin/env bash
# Start a local PostgreSQL and create the rsi test role and database.
# Idempotent. Prints the URL the tests use.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
if ! command -v pg_ctlcluster >/dev/null 2>&1; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
fi
ver="$(ls /etc/postgresql 2>/dev/null | sort -n | tail -n1)"
if [ -z "$ver" ]; then
  echo "setup-postgres: no cluster found under /etc/postgresql" >&2
  exit 1
fi
if ! pg_lsclusters -h | awk '{print $4}' | grep -q online; then
  # without our descriptors: the server would hold them (a caller's lock) for its life
  $SUDO bash "$(dirname "$0")/without-fds.sh" pg_ctlcluster "$ver" main start </dev/null
fi
run_psql() { if [ -n "$SUDO" ]; then sudo -u postgres psql "$@"; else su postgres -c "psql $(printf '%q ' "$@")"; fi; }
for _ in $(seq 1 30); do
  run_psql -qtAc "select 1" >/dev/null 2>&1 && break
  sleep 1
done
if [ "$(run_psql -qtAc "select 1 from pg_roles where rolname='rsi'")" != "1" ]; then
  run_psql -qc "create role rsi login password 'rsi' createdb"
fi
if [ "$(run_psql -qtAc "select 1 from pg_database where datname='rsi_test'")" != "1" ]; then
  run_psql -qc "create database rsi_test owner rsi"
fi
echo "setup-postgres: postgresql+psycopg://rsi:rsi@127.0.0.1:5432/rsi_test"
