#!/usr/bin/env bash
# Render a report.html to a PNG with headless Chromium, to look at the page as a person would.
#   usage: scripts/render_report.sh REPORT.html [OUT.png] [WIDTHxHEIGHT]
# Needs Debian's chromium (apt-get install -y chromium). No network is used: the report is self-contained.
set -euo pipefail
report="${1:?usage: $0 REPORT.html [OUT.png] [WIDTHxHEIGHT]}"
out="${2:-${report%.html}.png}"
size="${3:-1280x4000}"
browser="$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)"
if [ -z "$browser" ]; then
  echo "Error: chromium not found; install it with: apt-get install -y chromium" >&2
  exit 2
fi
profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
"$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
  --disable-component-update --disable-sync --user-data-dir="$profile" --hide-scrollbars \
  --screenshot="$(realpath -m "$out")" --window-size="${size/x/,}" "file://$(realpath "$report")" >/dev/null 2>&1
echo "$out"
