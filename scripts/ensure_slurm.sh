#!/usr/bin/env bash
# Make sure a single-node SLURM cluster answers on this machine: one `debug` partition whose
# only node is this host, so `specgate sweep ... hydra/launcher=submitit_slurm` runs its
# points as real SLURM jobs (`make slurm`; the SLURM sweep tests' fixture calls it).
#
# Idempotent and quick when done: with the node already idle it only asks `sinfo`. From
# scratch (a clean root Debian box) it installs Debian's SLURM and munge (~15 s), writes a
# munge key and /etc/slurm/slurm.conf, and starts munged, slurmctld and slurmd (no systemd
# needed). Needs root for that; without root it can only check.
#
# Environment:
#   SPECGATE_SLURM_WAIT_S   how long to wait for the node to turn idle (default 60)
set -euo pipefail

WAIT_S=${SPECGATE_SLURM_WAIT_S:-60}
CONF=/etc/slurm/slurm.conf
KEY=/etc/munge/munge.key
NODE=$(hostname -s)

say() { echo "ensure_slurm: $*" >&2; }
die() { say "ERROR: $*"; exit 1; }

node_state() { sinfo --noheader --nodes="$NODE" --format=%T 2>/dev/null | head -n1 || true; }
node_ready() { case "$(node_state)" in idle*|mixed*|allocated*|completing*) return 0;; esac; return 1; }

MARK="# Written by specgate's scripts/ensure_slurm.sh"
ours() { grep -qF "$MARK" "$CONF" 2>/dev/null; }
# The daemon's pid from its pid file, if that process is still the daemon (a pid file left
# by a machine's earlier life may name a pid that another program has now).
running() { local pid; pid=$(cat "/run/$1.pid" 2>/dev/null) && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$1" ]; }

# Memory: the node's real memory caps what it may declare (a node declaring more is drained).
mem_mb=$(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo)
[ "$mem_mb" -gt 4000 ] && mem_mb=4000
wanted=$(cat <<EOF
$MARK: a single-node cluster for sweeps and CI.
ClusterName=specgate
SlurmctldHost=$NODE
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
# Cores only (memory is not a consumable: a job without --mem would take the node's whole
# memory and run alone), and up to 4 jobs per core: a fleet's workers or a server's nodes run
# as steps of their own beside a sweep's points (harness/servers/srun.py)
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
NodeName=$NODE CPUs=$(nproc) RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
)
# Already up: a cluster someone else set up answers, or ours does with its daemons alive
# (slurmctld reports a node idle for minutes after its slurmd died).
if command -v sinfo >/dev/null && node_ready; then
  if ! ours || { running slurmctld && running slurmd && pgrep -x munged >/dev/null \
                 && [ "$(cat "$CONF" 2>/dev/null)" = "$wanted" ]; }; then
    exit 0
  fi
fi
[ "$(id -u)" -eq 0 ] || die "SLURM is not up on $NODE and this is not root: run 'sudo make slurm'"
if [ -s "$CONF" ] && ! ours; then
  die "$CONF exists and was not written by specgate: leaving that cluster's set-up alone"
fi

install_packages() {
  command -v apt-get >/dev/null || die "no apt-get here: install slurmctld slurmd slurm-client munge by hand"
  # the lists may be missing or stale on a fresh box: update once when the install cannot find them
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmctld slurmd slurm-client munge >/dev/null 2>&1; then
    say "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmctld slurmd slurm-client munge >/dev/null
  fi
}

for binary in slurmctld slurmd sinfo munged; do
  if ! command -v "$binary" >/dev/null; then
    say "installing slurmctld slurmd slurm-client munge"
    install_packages
    break
  fi
done

if [ ! -s "$KEY" ]; then
  say "writing a munge key"
  mkdir -p /etc/munge
  dd if=/dev/urandom bs=1 count=1024 of="$KEY" status=none
fi
chown munge:munge "$KEY"
chmod 400 "$KEY"
mkdir -p /run/munge && chown munge:munge /run/munge
if ! pgrep -x munged >/dev/null; then
  say "starting munged"
  runuser -u munge -- munged
fi

mkdir -p /etc/slurm /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /var/log/slurm
changed=0
if [ "$(cat "$CONF" 2>/dev/null)" != "$wanted" ]; then
  say "writing $CONF"
  printf '%s\n' "$wanted" > "$CONF"
  changed=1
fi

# A daemon running with an older slurm.conf is restarted.
for daemon in slurmctld slurmd; do
  if [ "$changed" -eq 1 ] && running "$daemon"; then
    say "restarting $daemon for the new slurm.conf"
    kill "$(cat "/run/$daemon.pid")"
    for _ in $(seq 50); do running "$daemon" || break; sleep 0.1; done
  fi
  if ! running "$daemon"; then
    say "starting $daemon"
    "$daemon"
  fi
done

for _ in $(seq "$((WAIT_S * 2))"); do
  if node_ready; then
    say "node $NODE $(node_state) in partition debug"
    exit 0
  fi
  case "$(node_state)" in
    down*|drain*) scontrol update nodename="$NODE" state=resume >/dev/null 2>&1 || true;;
  esac
  sleep 0.5
done
die "node $NODE is '$(node_state)' after ${WAIT_S}s; see /var/log/slurm/slurmctld.log and slurmd.log"
