#!/usr/bin/env bash
# Quick start #1: installs what rlx needs, builds it, and runs the flagship
# example, a tiny Llama-style model, printing its next-token logits' top entries.
# Extra arguments go to `rlx run` (e.g. --mode compiled, --backend vulkan, --json).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
log=$(mktemp -t rlx-build.XXXXXX.log)
[[ -x build/apps/rlx/rlx ]] || echo "building rlx (the first build takes a few minutes on 2 cores)..." >&2
if ! scripts/build.sh >"$log" 2>&1; then
  tail -n 40 "$log" >&2
  echo "build failed; full log: $log" >&2
  exit 1
fi
rm -f "$log"
exec build/apps/rlx/rlx run graphs/tiny_llama.json \
  --params graphs/tiny_llama.safetensors \
  --input tokens=@graphs/tiny_llama.inputs/tokens.npy \
  --top 5 "$@"
