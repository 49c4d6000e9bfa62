#!/bin/sh
# What `make bench-peers` (bench/edge_bench/bench_peers.py) compares the edge with, from Debian:
# OpenSSH's server (ssh -R), nginx (upstream and reverse proxy; the echo module reads a POST's
# whole body before the upstream answers), wrk (the load) and nghttp2's h2load (HTTP/2 load).
# Idempotent: nothing is done when all are there. The packages' own services are not used (the
# bench starts its own, on 127.0.0.1, from a temporary directory).
set -e
have() { command -v "$1" >/dev/null 2>&1; }
if [ -x /usr/sbin/sshd ] && have nginx && have wrk && have h2load && \
        [ -f /usr/lib/nginx/modules/ngx_http_echo_module.so ]; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openssh-server openssh-client \
    nginx-light libnginx-mod-http-echo wrk nghttp2-client
