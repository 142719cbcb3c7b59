#!/usr/bin/env bash
# Make a Docker engine and the rsi base image available on this host.
#
# Idempotent. Installs Debian's docker.io and debootstrap when missing, starts
# dockerd when no engine answers, and builds the base image (Debian minbase
# made with debootstrap, then `docker import`) when it is missing, and the
# agents' egress proxy image (the base plus Debian's tinyproxy-bin .deb, built
# offline from the downloaded package) when it is missing. No registry is
# needed: nothing is pulled. dockerd starts in its own session with no
# descriptor of the caller's (scripts/without-fds.sh).
#
#   RSI_BASE_IMAGE   image name (default rsi-bot/base:bookworm)
#   RSI_EGRESS_IMAGE egress proxy image (default rsi-bot/egress:bookworm)
#   RSI_DEBIAN_MIRROR  mirror for debootstrap (default: the one in apt sources)
set -euo pipefail

IMAGE="${RSI_BASE_IMAGE:-rsi-bot/base:bookworm}"
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi

need_pkgs=()
command -v dockerd >/dev/null 2>&1 || need_pkgs+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need_pkgs+=(debootstrap)
if [ "${#need_pkgs[@]}" -gt 0 ]; then
  echo "setup-docker: installing ${need_pkgs[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  echo "setup-docker: starting dockerd"
  $SUDO mkdir -p /var/log
  # its own session, without our descriptors (a lock or pipe of the caller's
  # would be held by the daemon for its whole life)
  ( $SUDO setsid bash "$(dirname "$0")/without-fds.sh" dockerd </dev/null >/var/log/rsi-dockerd.log 2>&1 & )
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && break
    sleep 1
  done
  if ! docker info >/dev/null 2>&1; then
    echo "setup-docker: dockerd did not come up; last log lines:" >&2
    tail -n 30 /var/log/rsi-dockerd.log >&2 || true
    exit 1
  fi
fi

build_egress() {
  local egress="${RSI_EGRESS_IMAGE:-rsi-bot/egress:bookworm}"
  if docker image inspect "$egress" >/dev/null 2>&1; then
    echo "setup-docker: image $egress present"
    return 0
  fi
  local ctx
  ctx="$(mktemp -d /tmp/rsi-egress.XXXXXX)"
  chmod 755 "$ctx"
  echo "setup-docker: building $egress (tinyproxy from Debian's package)"
  ( cd "$ctx" && apt-get download tinyproxy-bin >/dev/null 2>&1 ) || {
    $SUDO apt-get update -qq
    ( cd "$ctx" && apt-get download tinyproxy-bin >/dev/null 2>&1 )
  }
  cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM $IMAGE
COPY *.deb /tmp/
RUN dpkg -i /tmp/*.deb && rm -f /tmp/*.deb && tinyproxy -v
DOCKERFILE
  DOCKER_BUILDKIT=0 docker build -q -t "$egress" "$ctx" >/dev/null
  rm -rf "$ctx"
  echo "setup-docker: built $egress"
}

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "setup-docker: image $IMAGE present"
  build_egress
  exit 0
fi

mirror="${RSI_DEBIAN_MIRROR:-}"
if [ -z "$mirror" ]; then
  mirror="$(grep -hoE "^URIs: *[^ ]*debian[^ ]*" /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v security | head -n1 | awk "{print \$2}" || true)"
fi
if [ -z "$mirror" ]; then
  mirror="$(grep -hoE '^deb +[^ ]*debian[^ ]*' /etc/apt/sources.list 2>/dev/null | grep -v security | head -n1 | awk '{print $2}' || true)"
fi
mirror="${mirror:-http://deb.debian.org/debian}"

root="$(mktemp -d /tmp/rsi-rootfs.XXXXXX)"
trap '$SUDO rm -rf "$root"' EXIT
echo "setup-docker: debootstrap bookworm from $mirror (about a minute)"
$SUDO debootstrap --variant=minbase bookworm "$root" "$mirror" >/tmp/rsi-debootstrap.log 2>&1 || {
  echo "setup-docker: debootstrap failed; see /tmp/rsi-debootstrap.log" >&2
  tail -n 20 /tmp/rsi-debootstrap.log >&2
  exit 1
}
# The host's Python prefix is mounted under /root at run time: let a non-root
# user traverse it. Add an unprivileged user for sandboxed work.
$SUDO chmod 755 "$root/root"
$SUDO chroot "$root" /usr/sbin/groupadd -g 1000 rsi 2>/dev/null || true
$SUDO chroot "$root" /usr/sbin/useradd -u 1000 -g 1000 -m -d /home/rsi -s /bin/bash rsi 2>/dev/null || true
$SUDO rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"*
$SUDO tar -C "$root" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'WORKDIR /work' \
  - "$IMAGE" >/dev/null
echo "setup-docker: built $IMAGE"
build_egress
