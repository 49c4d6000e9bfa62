#!/bin/sh
# What building the edge's compiled core (edge_core/) needs from Debian besides Rust: the
# system OpenSSL's headers and pkg-config, for the `openssl` crate (client certificates are
# checked by the same OpenSSL the Python path's `ssl` uses: edge_core/src/client_cert.rs), and
# zlib's (compress-response: edge_core/src/encode.rs; without them libz-sys builds its own).
# Idempotent: nothing is done when pkg-config finds both.
set -e
if command -v pkg-config >/dev/null 2>&1 && pkg-config --exists openssl zlib; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libssl-dev zlib1g-dev pkg-config
pkg-config --exists openssl zlib
