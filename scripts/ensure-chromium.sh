#!/usr/bin/env bash
# Make sure the Debian chromium that the browser tests drive (through Playwright's
# executable_path; `playwright install` cannot download browsers here) is installed.
# As root it installs it with apt; otherwise it stops and prints the command to run.
set -euo pipefail

CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
INSTALL_CMD="apt-get update && apt-get install -y chromium"

if [ -x "$CHROMIUM" ]; then
    exit 0
fi

if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "chromium not found at $CHROMIUM: installing it ($INSTALL_CMD)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y chromium
    if [ ! -x "$CHROMIUM" ]; then
        echo "ERROR: apt installed chromium but $CHROMIUM is still missing" >&2
        exit 1
    fi
    exit 0
fi

echo "ERROR: chromium is missing ($CHROMIUM); the browser tests need it. Install it with:" >&2
echo "    sudo sh -c '$INSTALL_CMD'" >&2
echo "(or point CHROMIUM=/path/to/chromium at another build)" >&2
exit 1
