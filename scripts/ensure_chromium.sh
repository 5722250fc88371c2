#!/usr/bin/env bash
# Make sure a headless-capable Chromium is installed: tests/report/test_report.py opens the HTML
# report in it (DevTools protocol) to check that it renders without console errors.
# Called by `make install`. Idempotent: when a browser is found it only prints its path.
#
# Environment:
#   SPECGATE_CHROMIUM   a browser binary to use instead (checked, never installed)
set -euo pipefail

say() { echo "ensure_chromium: $*" >&2; }
die() { say "ERROR: $*"; exit 1; }

find_browser() {
  local candidate
  for candidate in "${SPECGATE_CHROMIUM:-}" chromium chromium-browser google-chrome google-chrome-stable; do
    [ -n "$candidate" ] || continue
    if command -v "$candidate" >/dev/null 2>&1; then command -v "$candidate"; return 0; fi
  done
  return 1
}

if browser=$(find_browser); then
  echo "$browser"
  exit 0
fi
[ -z "${SPECGATE_CHROMIUM:-}" ] || die "SPECGATE_CHROMIUM=$SPECGATE_CHROMIUM is not an executable"
[ "$(id -u)" -eq 0 ] || die "chromium missing and not root: run 'sudo apt-get install chromium' (or make install as root)"
command -v apt-get >/dev/null || die "chromium missing and no apt-get here: install Chromium by hand or set SPECGATE_CHROMIUM"

# Two set-ups at once (two make runs): one installs, the other waits and finds it.
exec 9>/var/lock/specgate-chromium.lock
flock -w 900 9 || die "another ensure_chromium.sh held its lock for 900s"
if browser=$(find_browser); then echo "$browser"; exit 0; fi

say "installing Debian's chromium (about 100 MB, once)"
DEBIAN_FRONTEND=noninteractive apt-get update -qq
# --no-install-recommends: the browser alone, plus one font family so text renders.
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
browser=$(find_browser) || die "apt-get installed chromium but no browser binary was found on PATH"
echo "$browser"
