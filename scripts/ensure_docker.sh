#!/usr/bin/env bash
# Make sure a Docker engine answers on this machine, and that debootstrap (which builds
# the simulator's base image, see containers/sim/) is installed. Called by `make install`.
#
# Idempotent and quick when done: with an engine already answering it only checks
# `docker info` and the debootstrap binary. Works as root without a TTY (CI). Without root
# it can only check, and says what to run.
#
# Environment:
#   SPECGATE_DOCKERD_LOG          dockerd's log (default /var/log/specgate-dockerd.log)
#   SPECGATE_DOCKERD_DATA_ROOT    dockerd's --data-root (default /var/lib/docker)
#   SPECGATE_DOCKER_STORAGE_DRIVER  force a storage driver (default: overlay2, then vfs)
#   SPECGATE_DOCKERD_WAIT_S       how long to wait for the engine to answer (default 60)
set -euo pipefail

LOG=${SPECGATE_DOCKERD_LOG:-/var/log/specgate-dockerd.log}
DATA_ROOT=${SPECGATE_DOCKERD_DATA_ROOT:-/var/lib/docker}
WAIT_S=${SPECGATE_DOCKERD_WAIT_S:-60}
PIDFILE=/var/run/specgate-dockerd.pid

say() { echo "ensure_docker: $*" >&2; }
die() { say "ERROR: $*"; exit 1; }

is_root() { [ "$(id -u)" -eq 0 ]; }

engine_answers() { docker info >/dev/null 2>&1; }

apt_updated=0
apt_install() {
  is_root || die "'$*' missing and not root: run 'sudo apt-get install $*' (or make install as root)"
  command -v apt-get >/dev/null || die "'$*' missing and no apt-get here: install $* by hand"
  if [ "$apt_updated" -eq 0 ]; then
    say "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    apt_updated=1
  fi
  say "installing $*"
  # --no-install-recommends: docker.io recommends a lot (git, xz, ...) that we don't need.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# --- binaries ---------------------------------------------------------------------
# Some machines have a docker *client* only (e.g. a static /usr/local/bin/docker): look
# for the daemon separately. Debian puts dockerd in /usr/sbin, which a non-login root
# shell may not have on PATH.
export PATH="$PATH:/usr/sbin:/sbin"
missing=()
command -v docker >/dev/null || missing+=(docker.io)
if ! engine_answers && ! command -v dockerd >/dev/null; then
  [ ${#missing[@]} -eq 0 ] && missing+=(docker.io)
fi
command -v debootstrap >/dev/null || missing+=(debootstrap)
[ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"

# --- the engine -------------------------------------------------------------------
if engine_answers; then
  exit 0
fi

if [ -n "${DOCKER_HOST:-}" ] && [[ "$DOCKER_HOST" != unix://* ]]; then
  die "DOCKER_HOST=$DOCKER_HOST does not answer (docker info fails); start that engine or unset DOCKER_HOST"
fi

is_root || die "no Docker engine answers and starting one needs root: run 'sudo $0' (or start dockerd yourself)"

# Two set-ups at once (two make runs): one starts the engine, the other waits for it.
exec 9>/var/lock/specgate-dockerd.lock
flock -w "$WAIT_S" 9 || die "another ensure_docker.sh held its lock for ${WAIT_S}s"
engine_answers && exit 0

# A dockerd we (or someone) started may still be coming up: never start a second one
# on the same data root, wait for it instead.
running_pid=$(pgrep -x dockerd | head -n1 || true)

start_dockerd() {  # $1 = storage driver
  mkdir -p "$(dirname "$LOG")" "$DATA_ROOT"
  say "starting dockerd (storage driver $1, log $LOG)"
  # --iptables=false: this machine (and CI) may not allow the netfilter changes dockerd
  # makes; published ports still work through docker-proxy (the userland proxy).
  # setsid + nohup: the engine outlives `make install` and has no controlling TTY.
  setsid nohup dockerd --iptables=false --storage-driver="$1" --data-root="$DATA_ROOT" \
    --pidfile="$PIDFILE" >>"$LOG" 2>&1 </dev/null 9>&- &
  running_pid=$!
}

wait_for_engine() {  # returns 0 once `docker info` answers, 1 if dockerd died, 2 on timeout
  local deadline=$((SECONDS + WAIT_S))
  while [ "$SECONDS" -lt "$deadline" ]; do
    engine_answers && return 0
    if [ -n "$running_pid" ] && ! kill -0 "$running_pid" 2>/dev/null; then
      return 1
    fi
    sleep 0.5
  done
  return 2
}

if [ -n "$running_pid" ]; then
  say "dockerd (pid $running_pid) is running but not answering yet: waiting up to ${WAIT_S}s"
  rc=0; wait_for_engine || rc=$?
  [ "$rc" -eq 0 ] && exit 0
  [ "$rc" -eq 2 ] && die "dockerd (pid $running_pid) did not answer within ${WAIT_S}s; see its log ($LOG) or stop it"
  # it died while we waited: fall through and start our own
fi

# overlay2 is the default and works on this kind of machine (ext4 root, kernel overlayfs).
# It fails on a root that is itself overlayfs without the right kernel support (Docker in
# Docker); then fall back to vfs, which always works but copies every layer in full.
if [ -n "${SPECGATE_DOCKER_STORAGE_DRIVER:-}" ]; then
  drivers=("$SPECGATE_DOCKER_STORAGE_DRIVER")
else
  drivers=(overlay2 vfs)
fi
for driver in "${drivers[@]}"; do
  start_dockerd "$driver"
  rc=0; wait_for_engine || rc=$?
  if [ "$rc" -eq 0 ]; then
    say "engine up: $(docker info --format '{{.ServerVersion}}, storage driver {{.Driver}}' 2>/dev/null)"
    exit 0
  fi
  if [ "$rc" -eq 2 ]; then
    die "dockerd (pid $running_pid) did not answer within ${WAIT_S}s; see $LOG"
  fi
  engine_answers && exit 0
  say "dockerd exited with storage driver $driver; last log lines:"
  tail -n 5 "$LOG" >&2 || true
done
die "could not start dockerd (tried storage drivers: ${drivers[*]}); see $LOG"
