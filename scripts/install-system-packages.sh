#!/usr/bin/env bash
# Installs the Debian packages Sickbay's tests and demo run for real. Idempotent; needs root or sudo.
# faketime (with libfaketime) is for `make test`'s year-ahead run: it moves the clock of the Python test
# process, so a test that only passes on some dates fails here instead of on a later calendar day.
set -euo pipefail

packages=(prometheus prometheus-alertmanager chromium fonts-dejavu-core faketime)
missing=()
for pkg in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ]; then sudo=(); else sudo=(sudo); fi
echo "installing Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
# --no-install-recommends keeps it small; the packages' services are never started by us (policy-rc.d
# or no systemd), the tests start their own instances on loopback.
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
