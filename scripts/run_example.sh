#!/usr/bin/env bash
# Quick start #1: installs what rlx needs, builds it, and runs the flagship
# example, a tiny Llama-style model, printing its next-token logits' top entries.
# Extra arguments go to `rlx run` (e.g. --mode compiled, --backend vulkan, --json).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh >/dev/null
exec build/apps/rlx/rlx run graphs/tiny_llama.json \
  --params graphs/tiny_llama.safetensors \
  --input tokens=@graphs/tiny_llama.inputs/tokens.npy \
  --top 5 "$@"
