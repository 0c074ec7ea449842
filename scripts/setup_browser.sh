#!/usr/bin/env bash
# Make sure a headless Chromium is installed: the report test (tests/integration/test_report_browser.py)
# opens report.html in it and checks that every plot rendered. Chromium comes from the Debian packages
# (apt-get; needs root, as on CI machines and here), never from a browser download of its own.
#
# Idempotent: does nothing when `chromium` (or the path in $CHROMIUM) already runs.
# usage: scripts/setup_browser.sh
set -euo pipefail
want=${CHROMIUM:-chromium}
if command -v "$want" >/dev/null 2>&1 && "$want" --version >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "setup_browser: chromium is missing; install the Debian package 'chromium' as root" \
       "(apt-get install chromium), or set CHROMIUM to a Chromium binary" >&2
  exit 2
fi
start=$(date +%s)
echo "setup_browser: installing chromium from the Debian packages"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
chromium --version
echo "setup_browser: ready in $(( $(date +%s) - start ))s"
