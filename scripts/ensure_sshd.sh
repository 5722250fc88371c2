#!/usr/bin/env bash
# Make sure OpenSSH's server binary is installed: tests/servers/test_remote_docker.py starts its own
# sshd on a loopback port (its own config, keys and authorized_keys in a temporary folder,
# nothing of this machine's ssh set-up touched) to drive the Docker engine over ssh://, as
# a laptop drives a GPU box. Idempotent: prints the binary's path when it is there.
set -euo pipefail

say() { echo "ensure_sshd: $*" >&2; }
die() { say "ERROR: $*"; exit 1; }
export PATH="$PATH:/usr/sbin:/sbin"

find_sshd() { command -v sshd 2>/dev/null; }

if sshd_bin=$(find_sshd) && command -v ssh >/dev/null && command -v ssh-keygen >/dev/null; then
  echo "$sshd_bin"
  exit 0
fi
[ "$(id -u)" -eq 0 ] || die "sshd missing and not root: run 'sudo apt-get install openssh-server openssh-client'"
command -v apt-get >/dev/null || die "sshd missing and no apt-get here: install OpenSSH's server by hand"

exec 9>/var/lock/specgate-sshd.lock
flock -w 300 9 || die "another ensure_sshd.sh held its lock for 300s"
if sshd_bin=$(find_sshd) && command -v ssh >/dev/null; then echo "$sshd_bin"; exit 0; fi

say "installing Debian's openssh-server (a few MB, once)"
DEBIAN_FRONTEND=noninteractive apt-get update -qq
# policy-rc.d 101: the package must not start the machine's own sshd on port 22
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d.specgate
chmod +x /usr/sbin/policy-rc.d.specgate
[ -e /usr/sbin/policy-rc.d ] || { cp /usr/sbin/policy-rc.d.specgate /usr/sbin/policy-rc.d; added_policy=1; }
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssh-server openssh-client >/dev/null
[ -n "${added_policy:-}" ] && rm -f /usr/sbin/policy-rc.d
rm -f /usr/sbin/policy-rc.d.specgate
sshd_bin=$(find_sshd) || die "apt-get installed openssh-server but no sshd was found"
echo "$sshd_bin"
