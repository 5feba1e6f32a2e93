#!/usr/bin/env bash
# Render `pre report` HTML pages with headless Chromium and save PNG screenshots.
#   scripts/screenshot_report.sh REPORT.html [OUT.png] [WIDTHxHEIGHT]     one page
#   scripts/screenshot_report.sh REPORT_DIR [OUT_DIR] [WIDTHxHEIGHT]       report.html and the
#       first per-sample pages (samples/*.html) of a report folder: OUT_DIR/report.png,
#       OUT_DIR/samples-<record>.png (SAMPLE_PAGES=N pages, default 3)
# Needs chromium (Debian: apt-get install -y chromium). Nothing is fetched from the
# network: the pages are self-contained and background networking is switched off.
set -euo pipefail
target=${1:?usage: scripts/screenshot_report.sh REPORT.html|REPORT_DIR [OUT.png|OUT_DIR] [WIDTHxHEIGHT]}
size=${3:-1400x2000}
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [[ -z "$browser" ]]; then
  echo "screenshot_report: chromium not found; install it (apt-get install -y chromium)" >&2
  exit 2
fi
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT

shoot() {  # shoot PAGE.html OUT.png
  "$browser" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$profile" --hide-scrollbars \
    --screenshot="$(realpath -m "$2")" --window-size="${size/x/,}" \
    "file://$(realpath "$1")" 2>/dev/null
  echo "$2"
}

if [[ -d "$target" ]]; then
  [[ -f "$target/report.html" ]] || { echo "screenshot_report: $target has no report.html (pre report --format html)" >&2; exit 2; }
  out=${2:-/tmp/report-shots}
  mkdir -p "$out"
  shoot "$target/report.html" "$out/report.png"
  if [[ -d "$target/samples" ]]; then
    find "$target/samples" -maxdepth 1 -name '*.html' | sort | head -n "${SAMPLE_PAGES:-3}" | while read -r page; do
      shoot "$page" "$out/samples-$(basename "$page" .html).png"
    done
  fi
else
  [[ -f "$target" ]] || { echo "screenshot_report: $target does not exist" >&2; exit 2; }
  shoot "$target" "${2:-/tmp/report.png}"
fi
