#!/bin/sh
# Test dependencies from Debian that pip cannot install. Idempotent: nothing is done when
# every command is on PATH.
# - Pebble (the ACME test CA) and its mock DNS server pebble-challtestsrv
#   (tests/edge/test_acme_pebble.py). Debian bookworm ships both in the `pebble` package;
#   later releases split out `pebble-challtestsrv`.
# - Chromium and its WebDriver (tests/dashboard: the dashboard in a real browser, headless).
# - HAProxy: the TCP load balancer in front of several edge instances (make cluster,
#   tests/edge/test_cluster.py).
# - The OWASP Core Rule Set (modsecurity-crs: /usr/share/modsecurity-crs), the rules the
#   owasp-crs-* actions run (chalicelib/core/policy/waf.py, tests/edge/test_owasp_crs.py).
set -e
have() { command -v "$1" >/dev/null 2>&1; }
crs() { [ -d /usr/share/modsecurity-crs/rules ]; }
if have pebble && have pebble-challtestsrv && have chromium && have chromedriver && \
        have haproxy && crs; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
if ! have pebble; then
    $SUDO apt-get install -y -qq pebble
fi
if ! have pebble-challtestsrv; then
    $SUDO apt-get install -y -qq pebble-challtestsrv
fi
if ! have chromium || ! have chromedriver; then
    $SUDO apt-get install -y -qq chromium chromium-driver
fi
if ! have haproxy; then
    $SUDO apt-get install -y -qq haproxy
fi
if ! crs; then
    $SUDO apt-get install -y -qq --no-install-recommends modsecurity-crs
fi
have pebble && have pebble-challtestsrv && have chromium && have chromedriver && have haproxy && crs
