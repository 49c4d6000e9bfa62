#!/bin/sh
# Test dependencies from Debian that pip cannot install: Pebble (the ACME test CA) and its mock
# DNS server pebble-challtestsrv (tests/edge/test_acme_pebble.py). Idempotent: nothing is done
# when both are on PATH. Debian bookworm ships both in the `pebble` package; later releases
# split out `pebble-challtestsrv`.
set -e
if command -v pebble >/dev/null 2>&1 && command -v pebble-challtestsrv >/dev/null 2>&1; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq pebble
if ! command -v pebble-challtestsrv >/dev/null 2>&1; then
    $SUDO apt-get install -y -qq pebble-challtestsrv
fi
command -v pebble >/dev/null && command -v pebble-challtestsrv >/dev/null
