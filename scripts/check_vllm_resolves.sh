#!/usr/bin/env bash
# CI: does '.[vllm]' resolve on the registry without moving this machine's pinned
# CPU torch (constraints/cpu.txt)? A dry run only: nothing is installed. Prints the
# vLLM pip chose and, when that is not the newest on the registry, why the newest
# cannot be had here (its own torch pin). Fails only when the extra does not
# resolve at all or the resolution would replace torch.
set -euo pipefail
cd "$(dirname "$0")/.."
py="${PYTHON:-python}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if ! "$py" -m pip install --dry-run --quiet --report "$work/extra.json" '.[vllm]' -c constraints/cpu.txt >"$work/log" 2>&1; then
  tail -n 20 "$work/log"
  if grep -qiE "ResolutionImpossible|conflicting dependencies|conflict is caused by" "$work/log"; then
    echo "vllm check: '.[vllm]' does not resolve with constraints/cpu.txt" >&2; exit 1
  fi
  # Not a conflict (the registry unreachable or slow): say so, and do not fail CI on the network.
  echo "vllm check: could not check, pip failed for a reason other than a dependency conflict (above)" >&2; exit 0
fi
newest="$("$py" -m pip index versions vllm 2>/dev/null | sed -n 's/^vllm (\(.*\))$/\1/p')"
if [[ -n "$newest" ]]; then
  "$py" -m pip install --dry-run --quiet --no-deps --report "$work/newest.json" "vllm==$newest" >/dev/null 2>&1 || true
fi
"$py" - "$work" "$newest" <<'PY'
import json, pathlib, sys

work, newest = pathlib.Path(sys.argv[1]), sys.argv[2]
plan = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.loads((work / "extra.json").read_text())["install"]}
pinned = next(l.split("==")[1].strip() for l in open("constraints/cpu.txt") if l.startswith("torch=="))
if "torch" in plan:
    sys.exit(f"vllm check: FAIL, resolving '.[vllm]' would replace torch {pinned} by {plan['torch']}")
chosen = plan.get("vllm", "(already installed)")
print(f"vllm check: '.[vllm]' resolves with torch {pinned} kept; pip chose vllm {chosen}")
if newest and newest != chosen:
    why = "its requirements could not be read"
    report = work / "newest.json"
    if report.exists():
        reqs = json.loads(report.read_text())["install"][0]["metadata"].get("requires_dist", [])
        torch_reqs = [r for r in reqs if r.split(";")[0].replace(" ", "").startswith(("torch==", "torch>", "torch<", "torch~", "torch!"))]
        why = f"it requires {', '.join(torch_reqs) or 'no torch'}, the constraint pins torch=={pinned}"
    print(f"vllm check: the newest vllm on the registry, {newest}, does not resolve here: {why}")
PY
