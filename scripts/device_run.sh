#!/usr/bin/env bash
# Runs rlx's Vulkan executor on a machine with a GPU driver but no packages
# (the lent NVIDIA machine): golden suite on Vulkan, then `rlx bench` figures.
# Prepare here first:   scripts/device_run.sh --pack   (copies the binaries and the
# shared libraries they need into .device-pack/, next to prepare-device.sh's .device-vk/)
# On the device:        scripts/device_run.sh [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
pack=.device-pack
if [[ "${1:-}" == "--pack" ]]; then
  rm -rf "$pack"; mkdir -p "$pack/lib"
  # test_vulkan stays behind to keep the pack under the device tool's 64 MiB; add it if room allows.
  cp build/apps/rlx/rlx build/tests/test_golden "$pack/"
  strip "$pack"/rlx "$pack"/test_*
  for b in "$pack"/rlx "$pack"/test_*; do
    ldd "$b" | awk '/=> \// {print $3}' | grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux|libgcc_s|libstdc\+\+)\.' | xargs -r cp -Lu -t "$pack/lib"
  done
  grep -qx "/$pack/" .git/info/exclude || echo "/$pack/" >> .git/info/exclude
  du -sh "$pack"; exit 0
fi
out=${1:-/tmp/rlx-device}
mkdir -p "$out"
dpkg -x .device-vk/libvulkan1_*.deb / && ldconfig
export VK_ICD_FILENAMES=$PWD/.device-vk/nvidia_egl_icd.json
export LD_LIBRARY_PATH=$PWD/$pack/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# The test binaries look for the sources where they were built.
[[ -e /work/main ]] || { mkdir -p /work && ln -s "$PWD" /work/main; }
rlx=$pack/rlx
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
$rlx devices | tee "$out/devices.txt"
echo "== golden suite on Vulkan (all modes)"
$pack/test_golden --gtest_filter='Cases/Golden.*vulkan*' --gtest_brief=1 2>&1 | tail -5 | tee "$out/golden.txt"
[[ -x $pack/test_vulkan ]] && $pack/test_vulkan --gtest_brief=1 2>&1 | tail -3 | tee -a "$out/golden.txt"
echo "== benchmarks"
$rlx bench bench/graphs/decoder_block.json --random-params --input x=random:1 --backends vulkan,cpu --reps 20 \
  --format md 2>/dev/null | tee "$out/bench_decoder.md"
$rlx bench bench/graphs/matmul_4096.json --random-params --input a=random:1 --input b=random:2 --backends vulkan \
  --modes lazy,compiled --reps 10 --format md 2>/dev/null | tee "$out/bench_matmul4096.md"
$rlx run bench/graphs/decoder_block.json --random-params --input x=random:1 --backend vulkan --mode compiled \
  --repeat 5 --profile 2>&1 >/dev/null | head -30 | tee "$out/profile_decoder.txt"
