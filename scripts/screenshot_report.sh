#!/usr/bin/env bash
# Render a `pre report` HTML page with headless Chromium and save a PNG screenshot.
#   scripts/screenshot_report.sh runs/sweeps/x/report/report.html [out.png] [WIDTHxHEIGHT]
# Needs chromium (Debian: apt-get install -y chromium). Nothing is fetched from the
# network: the page is self-contained and background networking is switched off.
set -euo pipefail
html=${1:?usage: scripts/screenshot_report.sh REPORT.html [OUT.png] [WIDTHxHEIGHT]}
out=${2:-/tmp/report.png}
size=${3:-1280x2400}
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [[ -z "$browser" ]]; then
  echo "screenshot_report: chromium not found; install it (apt-get install -y chromium)" >&2
  exit 2
fi
[[ -f "$html" ]] || { echo "screenshot_report: $html does not exist" >&2; exit 2; }
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
"$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$profile" --hide-scrollbars \
  --screenshot="$(realpath -m "$out")" --window-size="${size/x/,}" \
  "file://$(realpath "$html")" 2>/dev/null
echo "$out"
