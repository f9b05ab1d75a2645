#!/usr/bin/env bash
# Make sure Debian's prometheus binary, which the cluster tests and benchmark run on loopback
# (tests/prometheus_fixture.py), is installed. As root it installs it with apt (no daemon starts
# in a container; the tests run their own); otherwise it stops and prints the command to run.
set -euo pipefail

PROMETHEUS="${PROMETHEUS:-/usr/bin/prometheus}"
INSTALL_CMD="apt-get update && apt-get install -y --no-install-recommends prometheus"

if [ -x "$PROMETHEUS" ]; then
    exit 0
fi

if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "prometheus not found at $PROMETHEUS: installing it ($INSTALL_CMD)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends prometheus
    if [ ! -x "$PROMETHEUS" ]; then
        echo "ERROR: apt installed prometheus but $PROMETHEUS is still missing" >&2
        exit 1
    fi
    exit 0
fi

echo "ERROR: prometheus is missing ($PROMETHEUS); the cluster tests need it. Install it with:" >&2
echo "    sudo sh -c '$INSTALL_CMD'" >&2
echo "(or point PROMETHEUS=/path/to/prometheus at another build)" >&2
exit 1
