#!/usr/bin/env bash
# Runs rlx's Vulkan executor on the lent GPU machine (NVIDIA driver, no packages, no
# network): the golden suite and the Vulkan unit tests on the GPU, then the benchmarks,
# per-kernel profiles and PyTorch's figures for the same work, taken in the same call.
#
# Here (after scripts/build.sh, and ../shared/gpu/prepare-device.sh for .device-vk/):
#   scripts/device_run.sh --pack      # .device-pack/: binaries, their libraries, sources (<64 MiB)
# There (the device tool, carrying .device-pack and .device-vk):
#   scripts/device_run.sh [STAGE]     # STAGE: all (default), test, bench, profile, torch, half, tc, nbits, cpu
# ("half": issue 9's f16 figures: 2-byte-storage tests on the GPU, f16 matmul 4096^3 and the
# d-4096 decoder block with --dtype f16, their kernel profiles, and PyTorch fp16 in the same call;
# "tc": issue 22's tensor-core routes (cm2, KHR, NV) for f16 and bf16 side by side, PyTorch
# beside them (env: ROUTES, CM2S tiles to sweep, GOLDEN=1 adds the 16-bit goldens, DECODER=1 the
# f16/bf16 d-4096 decoder block, HOST=1 the f32 block's compiled replay alone and in the round robin);
# "clocks": profiles with the SM clock beside them; "cm2sweep": cm2 tiles, unrolling, split-K
# on 4096^3 and the decoder's linears (DCFG="TILE:SPLITK ...");
# "nbits": issue 19's byte storage checked on the GPU and the 4-bit gemv 14336x4096 beside PyTorch)
# From a helper's worktree (the device tool sends the session's own checkout, not the worktree):
# copy .device-pack, .device-vk and this script (as DIR/scripts/device_run.sh) into a folder of
# that checkout which .git/info/exclude ignores, carry DIR, and run `bash DIR/scripts/device_run.sh`.
# Results go to $OUT (or /tmp/rlx-device). RLX_VK_MATMUL / RLX_VK_SPLITK override the matmul
# tiles and split-K for tuning (lib/backends/vulkan/kernels.cpp says how).
set -uo pipefail
cd "$(dirname "$0")/.."
pack=.device-pack
if [[ "${1:-}" == "--pack" ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/lib" "$tmp/src"
  B=${BUILD_DIR:-build}  # the build to pack
  # PACK_EXTRA_TESTS: more test binaries whose Vulkan parts should run on the GPU (each adds
  # ~4.7 MB, and the carry with the checkout's files must stay under 64 MiB: one fits), e.g.
  # PACK_EXTRA_TESTS=test_attention_views
  cp "$B/apps/rlx/rlx" "$B/tests/test_golden" "$B/tests/test_vulkan" "$B/tests/test_vulkan_half" "$tmp/"
  for t in ${PACK_EXTRA_TESTS:-}; do cp "$B/tests/$t" "$tmp/" || exit 2; done
  strip "$tmp"/rlx "$tmp"/test_*
  for b in "$tmp"/rlx "$tmp"/test_*; do
    ldd "$b" | awk '/=> \// {print $3}' | grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux|libgcc_s|libstdc\+\+)\.' | xargs -r cp -Lu -t "$tmp/lib"
  done
  # OpenBLAS and oneDNN are opened with dlopen (not in ldd's list): the CPU executor needs them there
  for l in libopenblas.so.0 libdnnl.so.2; do
    f=$(ldconfig -p | awk -v l="$l" '$1 == l {print $NF; exit}')
    [[ -n $f ]] || continue
    cp -L "$f" "$tmp/lib/$l"
    ldd "$f" | awk '/=> \// {print $3}' | grep -E '/(libgfortran|libquadmath|libgomp)\.' | xargs -r cp -Lu -t "$tmp/lib"
  done
  git archive HEAD tests graphs bench scripts | tar x -C "$tmp/src"  # test data, graphs, torch_gpu.py, scripts/nbits.py
  pwd > "$tmp/source_dir"  # where the test binaries look for their data (RLX_SOURCE_DIR)
  rm -rf "$pack"; mkdir -p "$pack"
  tar czf "$pack/pack.tgz" -C "$tmp" .
  grep -qx "/$pack/" "$(git rev-parse --git-path info/exclude)" || echo "/$pack/" >> "$(git rev-parse --git-path info/exclude)"
  du -sh "$pack"; exit 0
fi
stage=${1:-all}
out=${OUT:-/tmp/rlx-device}
mkdir -p "$out"
P=$PWD/$pack
tar xzf "$P/pack.tgz" -C "$P"
dpkg -x .device-vk/libvulkan1_*.deb / && ldconfig
export VK_ICD_FILENAMES=$PWD/.device-vk/nvidia_egl_icd.json
export LD_LIBRARY_PATH=$P/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# The test binaries look for their data where they were built.
want=$(cat "$P/source_dir")
[[ -e "$want" ]] || { mkdir -p "$(dirname "$want")"; ln -sfn "$P/src" "$want"; }
cd "$P/src"
R=$P/rlx
nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current \
  --format=csv,noheader | tee "$out/gpu.txt"
B() { timeout 120 $R bench "$@" --format md 2>/dev/null | tail -n +3; }
PROF() { timeout 120 $R run "$@" --backend vulkan --mode compiled --profile 2>&1 >/dev/null | head -"${PN:-12}"; }
if [[ $stage == all || $stage == test ]]; then
  echo "== golden suite on Vulkan (all modes), Vulkan unit tests"
  timeout 240 $P/test_golden --gtest_filter='Cases/Golden.*vulkan*' --gtest_brief=1 2>&1 | tail -4 | tee "$out/golden.txt"
  timeout 120 $P/test_vulkan --gtest_brief=1 --gtest_filter=-VulkanValidation.* 2>&1 | tail -4 | tee -a "$out/golden.txt"
  timeout 120 $P/test_vulkan_half --gtest_brief=1 2>&1 | tail -4 | tee -a "$out/golden.txt"
fi
if [[ $stage == all || $stage == bench ]]; then
  echo "== benchmarks (per run, wall and device time, transfers)"
  B bench/graphs/matmul_4096.json --input a=random:1 --input b=random:2 --backends vulkan --reps 10
  B bench/graphs/gelu_chain_32.json --input x=random:1 --backends vulkan --reps 10
  for g in decoder_block_4096 decoder_block; do
    B bench/graphs/$g.json --random-params --input x=random:1 --backends vulkan --reps 20
    B bench/graphs/$g.json --random-params --input x=random:1 --backends vulkan --modes compiled --reps 20
  done
  B bench/graphs/gemv_14336x4096.json --input x=random:1 --input w=random:2 --backends vulkan --modes compiled --reps 20
  B bench/graphs/rms_norm_8192.json --input x=random:1 --input w=random:2 --backends vulkan --modes compiled --reps 10
  for g in softmax_8192 transpose_8192; do
    B bench/graphs/$g.json --input x=random:1 --backends vulkan --modes compiled --reps 10
  done
fi | tee "$out/bench.md"
if [[ $stage == all || $stage == profile ]]; then
  echo "== kernel profiles (GPU timestamps)"
  PN=8 PROF bench/graphs/matmul_4096.json --input a=random:1 --input b=random:2 --repeat 5
  PN=6 PROF bench/graphs/gelu_chain_32.json --input x=random:1 --repeat 5
  PN=30 PROF bench/graphs/decoder_block_4096.json --random-params --input x=random:1 --repeat 5
  PN=30 PROF bench/graphs/decoder_block.json --random-params --input x=random:1 --repeat 5
  PN=5 PROF bench/graphs/gemv_14336x4096.json --input x=random:1 --input w=random:2 --repeat 5
  for g in softmax_8192 transpose_8192; do PN=5 PROF bench/graphs/$g.json --input x=random:1 --repeat 5; done
  PN=5 PROF bench/graphs/rms_norm_8192.json --input x=random:1 --input w=random:2 --repeat 5
fi | tee "$out/profiles.txt"
if [[ $stage == all || $stage == half ]]; then
  echo "== f16 (issue 9): tests on the GPU, benchmarks, profiles, PyTorch fp16"
  $R devices --backend vulkan 2>&1 | grep -E "16-bit|cooperative|tensor-core"
  timeout 120 $P/test_vulkan_half --gtest_brief=1 2>&1 | tail -3
  timeout 200 $P/test_golden --gtest_filter='Cases/Golden.*vulkan*16*' --gtest_brief=1 2>&1 | tail -2
  B bench/graphs/matmul_4096.json --input a=random:1 --input b=random:2 --dtype f16 --backends vulkan --modes compiled --reps 20
  RLX_VK_NO_COOPMAT=1 B bench/graphs/matmul_4096.json --input a=random:1 --input b=random:2 --dtype f16 --backends vulkan --modes compiled --reps 5
  B bench/graphs/decoder_block_4096.json --random-params --input x=random:1 --dtype f16 --backends vulkan --modes compiled --reps 20
  PN=8 PROF bench/graphs/matmul_4096.json --input a=random:1 --input b=random:2 --dtype f16 --repeat 5
  PN=40 PROF bench/graphs/decoder_block_4096.json --random-params --input x=random:1 --dtype f16 --repeat 5
  timeout 120 python3 bench/torch_gpu.py --reps 20 --half 2>&1
fi | tee "$out/half.txt"
if [[ $stage == sweep16 ]]; then  # tuning the tensor-core matmul: RLX_VK_COOP / _S16 / _SHAPE / SPLITK
  for s16 in ${S16S:-0 1}; do for c in ${COOPS:-128x128x64x64 128x128x32x64 64x128x32x64 64x64x32x32}; do
    for sh in ${SHAPES:-16x16x16}; do
      echo "s16 $s16 tile $c shape $sh probe ${RLX_VK_COOP_PROBE:-}: $(RLX_VK_COOP_S16=$s16 RLX_VK_COOP=$c RLX_VK_COOP_SHAPE=$sh PN=3 PROF bench/graphs/matmul_4096.json --input a=random:1 --input b=random:2 --dtype f16 --repeat 3 | grep ' matmul ' | head -1)"
    done; done; done
  PN=3 PROF bench/graphs/matmul_4096.json --input a=random:1 --input b=random:2 --dtype f16 --repeat 3 2>&1 | tail -3
fi
if [[ $stage == tc ]]; then  # issue 22: the tensor-core routes (RLX_VK_COOPMAT cm2 / khr / nv) for f16 and bf16
  echo "== devices"; $R devices --backend vulkan 2>&1 | grep -iE "api|driver|cooperative|tensor|bf16|16-bit"
  MM="bench/graphs/matmul_4096.json --input a=random:1 --input b=random:2"
  NT="bench/graphs/matmul_4096_nt.json --input a=random:1 --input b=random:2"
  for r in ${ROUTES:-cm2 khr nv}; do
    echo "== RLX_VK_COOPMAT=$r: tests on the GPU"
    RLX_VK_COOPMAT=$r timeout 120 $P/test_vulkan_half --gtest_brief=1 2>&1 | grep -E "Failure|want|rror|tests from|PASSED|FAILED" | head -12
    [[ -n ${GOLDEN:-} ]] && RLX_VK_COOPMAT=$r timeout 200 $P/test_golden --gtest_filter='Cases/Golden.*vulkan*16*' --gtest_brief=1 2>&1 | tail -2
    for dt in f16 bf16; do
      for g in MM NT; do
        echo "$r $g $dt: $(RLX_VK_COOPMAT=$r PN=12 PROF ${!g} --dtype $dt --repeat 5 | grep -E 'matmul' | head -3 | tr '\n' ' ')"
      done
    done
  done
  # a . b with b [K, N] (matmul_4096) and b [N, K] (matmul_4096_nt: linear's layout)
  for c in ${CM2S:-}; do
    for g in MM NT; do echo "RLX_VK_CM2=$c $g f16: $(RLX_VK_CM2=$c PN=12 PROF ${!g} --dtype f16 --repeat 5 | grep 'matmul' | head -2 | tr '\n' ' ')"; done
  done
  for dt in f16 bf16; do B $MM --dtype $dt --backends vulkan --modes compiled --reps 20; done
  if [[ -n ${DECODER:-} ]]; then
    for dt in f16 bf16; do
      B bench/graphs/decoder_block_4096.json --random-params --input x=random:1 --dtype $dt --backends vulkan --modes compiled --reps 20
    done
    echo "-- RLX_VK_COOPMAT=khr (subgroup matrices), then nv"
    for r in khr nv; do
      RLX_VK_COOPMAT=$r B bench/graphs/decoder_block_4096.json --random-params --input x=random:1 --dtype f16 --backends vulkan --modes compiled --reps 20
    done
    PN=40 PROF bench/graphs/decoder_block_4096.json --random-params --input x=random:1 --dtype f16 --repeat 5
  fi
  if [[ -n ${HOST:-} ]]; then  # the f32 block's compiled replay alone and in the round robin of all modes
    DB="bench/graphs/decoder_block_4096.json --random-params --input x=random:1 --backends vulkan"
    B $DB --modes compiled --reps 20
    echo "-- RLX_VK_KEEP_BLOCKS=0 (empty blocks freed after every run, as before issue 22)"
    RLX_VK_KEEP_BLOCKS=0 B $DB --reps 20
    echo "-- default (empty blocks kept through 4 runs)"
    B $DB --reps 20
    B $DB --reps 20 --dtype f16
  fi
  timeout 150 python3 bench/torch_gpu.py --reps 20 --half 2>&1
fi | tee "$out/tc.txt"
if [[ $stage == clocks ]]; then  # issue 22: the cm2 matmul's occasional 4x slower runs against the SM clock
  CLK() { nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv,noheader; }
  MM="bench/graphs/matmul_4096.json --input a=random:1 --input b=random:2"
  for i in 1 2 3; do
    for dt in f16 bf16; do
      echo "clocks $(CLK) | cm2 $dt: $(PN=12 PROF $MM --dtype $dt --repeat 5 | grep matmul | head -1)"
    done
  done
  for dt in f16 bf16; do
    echo "clocks $(CLK)"
    B $MM --dtype $dt --backends vulkan --modes compiled --reps 20
    B bench/graphs/decoder_block_4096.json --random-params --input x=random:1 --dtype $dt --backends vulkan --modes compiled --reps 20
    echo "clocks $(CLK)"
  done
  B bench/graphs/decoder_block_4096.json --random-params --input x=random:1 --dtype f16 --backends vulkan --reps 20
  echo "clocks $(CLK)"
  timeout 150 python3 bench/torch_gpu.py --reps 20 --half 2>&1
fi | tee "$out/clocks.txt"
if [[ $stage == cm2sweep ]]; then  # issue 22: cm2 tiles, unrolling and split-K on 4096^3 and the decoder's linears
  MM="bench/graphs/matmul_4096.json --input a=random:1 --input b=random:2"
  DB="bench/graphs/decoder_block_4096.json --random-params --input x=random:1 --dtype f16"
  for u in 1 2 4 8; do
    echo "unroll $u 4096^3 f16: $(RLX_VK_CM2=256x128x256x64x$u PN=12 PROF $MM --dtype f16 --repeat 8 | grep matmul | head -1)"
  done
  for c in ${DCFG:-default 256x128x256x64:1 256x128x256x64:2 256x128x128x64:1 256x128x128x64:2 256x128x128x64:4 128x128x128x64:1 256x128x256x64x8:1}; do
    t=${c%%:*} k=${c#*:}
    [[ $c == default ]] && t="" k=""
    echo "== decoder f16 linears, RLX_VK_CM2=$t RLX_VK_SPLITK=$k"
    ( [[ -n $t ]] && export RLX_VK_CM2=$t; [[ -n $k ]] && export RLX_VK_SPLITK=$k
      PN=40 PROF $DB --repeat 8 | grep -E "_lin|node '[qkvo]'|total over" )
  done
fi | tee "$out/cm2sweep.txt"
if [[ $stage == nbits ]]; then  # issue 19: bytes on the device, the 4-bit gemv, PyTorch beside it
  echo "== i8/u8 as bytes: quantization goldens and tests/vulkan_bytes.py on the GPU"
  timeout 200 $P/test_golden --gtest_filter='Cases/Golden.*vulkan*quant*:Cases/Golden.*vulkan*matmul_integer*:Cases/Golden.*vulkan*nbits*:Cases/Golden.*vulkan*cast*8*' --gtest_brief=1 2>&1 | tail -3
  timeout 200 python3 tests/vulkan_bytes.py --rlx $R 2>&1 | grep -v "^ok" | tail -15
  echo "== 4-bit gemv 14336x4096 (37.7 MB read: 29.4 MB nibbles, 7.3 MB f32 scales, 0.9 MB zero points)"
  NB="bench/graphs/gemv_nbits_14336x4096.json --input x=random:1 --input b=random:2 --input scales=random:3 --input zp=random:4"
  B $NB --backends vulkan --modes compiled --reps 50
  PN=8 PROF $NB --repeat 20
  for c in ${NBITS_GEMV:-64x4 64x4x1x1 64x4x2x1 64x4x4x1 32x4x4x1 32x8x2x1 64x8x2x1 128x4x2x1 128x8x1x1 256x4x1x1 256x2x2x1 64x2x4x1}; do
    echo "RLX_VK_NBITS_GEMV=$c: $(RLX_VK_NBITS_GEMV=$c PN=20 PROF $NB --repeat 20 | grep ' matmul_nbits ')"
  done
  echo "general kernel: $(RLX_VK_NBITS_GENERIC=1 PN=20 PROF $NB --repeat 5 | grep ' matmul_nbits ')"
  echo "== f32 gemv 14336x4096 (235 MB read)"
  PN=8 PROF bench/graphs/gemv_14336x4096.json --input x=random:1 --input w=random:2 --repeat 20
  timeout 120 python3 bench/torch_nbits.py --reps 50 2>&1
fi | tee "$out/nbits.txt"
if [[ $stage == cpu ]]; then  # issue 26: the lent machine's Xeon (AMX) against PyTorch's CPU path
  echo "== CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) threads"
  lscpu | grep -o -E 'amx[a-z_0-9]*|avx512_vnni|avx512_bf16' | sort -u | tr '\n' ' '; echo
  $R devices --backend cpu
  W=$(mktemp -d)
  python3 - "$W" <<'PY'
import json, struct, sys
import numpy as np
d = sys.argv[1]
w = (np.random.default_rng(0).standard_normal((4096, 4096)) * 0.02).astype(np.float32)
h = json.dumps({"w": {"dtype": "F32", "shape": [4096, 4096], "data_offsets": [0, w.nbytes]}}).encode()
h += b" " * (-len(h) % 8)
open(f"{d}/lin.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + w.tobytes())
json.dump({"format": "rlx.graph", "version": 1, "name": "linear_4096",
           "nodes": [{"id": "x", "op": "input", "shape": [4096, 4096]}, {"id": "w", "op": "param", "shape": [4096, 4096]},
                     {"id": "y", "op": "linear", "inputs": ["x", "w"]}], "outputs": ["y"]}, open(f"{d}/lin.json", "w"))
PY
  timeout 200 $R quantize $W/lin.json -p $W/lin.safetensors --format int8 -o $W/lin_i8.json --min-size 0 --input x=random:1 2>&1 | tail -4
  B bench/graphs/matmul_4096.json --input a=random:1 --input b=random:2 --backends cpu --modes compiled --reps 10
  B bench/graphs/matmul_4096.json --input a=random:1 --input b=random:2 --backends cpu --modes compiled --reps 10 --dtype bf16
  B $W/lin.json -p $W/lin.safetensors --input x=random:1 --backends cpu --modes compiled --reps 10
  B $W/lin_i8.json -p $W/lin_i8.safetensors --input x=random:1 --backends cpu --modes compiled --reps 10
  B bench/graphs/decoder_block.json --random-params --input x=random:1 --backends cpu --modes compiled --reps 20
  echo "-- RLX_CPU_ISA=avx2 (the AVX2 + FMA path forced on this AVX-512 CPU)"
  RLX_CPU_ISA=avx2 B bench/graphs/decoder_block.json --random-params --input x=random:1 --backends cpu --modes compiled --reps 20
  RLX_CPU_ISA=avx2 B bench/graphs/matmul_4096.json --input a=random:1 --input b=random:2 --backends cpu --modes compiled --reps 10
  timeout 200 python3 bench/torch_cpu.py --reps 10 2>&1
fi | tee "$out/cpu.txt"
if [[ $stage == all || $stage == torch ]]; then
  echo "== PyTorch $(python3 -c 'import torch; print(torch.__version__)' 2>/dev/null) on the same GPU"
  timeout 200 python3 bench/torch_gpu.py --reps 20 2>&1 | tee "$out/torch.jsonl"
fi
