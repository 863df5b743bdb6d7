#!/usr/bin/env bash
# Issues 30 and 31 on the lent GPU: bench/gpu_targets.py (ResNet-50 / ViT-S/16 at batch 32,
# the d-2048 decoder's generate loop and a decode step's profile, the detectors) with rlx's
# per-kernel profiles of ResNet-50 and ViT-S/16; `tests` runs the Vulkan goldens and unit tests
# (and any test binary that --pack's PACK_EXTRA_TESTS added).
# Here: scripts/build.sh && scripts/device_run.sh --pack; copy .device-pack/pack.tgz,
# ../shared/gpu's .device-vk and this script into DIR of the session's checkout (ignored by git),
# then on the device: bash DIR/device_targets.sh [vision generate detectors profile] (default all).
# Also: `viewsab` (ViT-S/16 f16 with RLX_VK_ATTENTION_VIEWS=0, =2 and on, alternating, and its
# profiles with the pass off and at 2), `cm2` (issue 22: matmul_cm2 on 4096^3, ViT-S/16's linears and ResNet-50's 1x1
# convolutions under each variant of CM2V, bench/cm2_bench.py, then matmul 4096^3 f16/bf16 and the
# d-4096 decoder block f16 benched under each of CM2B; PyTorch in the same call; CM2ONLY=a,b limits the
# products, CM2DT=f16 the dtypes, CM2TORCH= leaves PyTorch out of cm2_bench.py), `convroutes` (ResNet-50 f16 profiled and benched under each setting of CONVROUTES,
# default "RLX_VK_CONV=default RLX_VK_EPILOGUE=0 RLX_VK_CONV=rows"; A=1,B=2 sets both), `attnrows` (the f16 tensor-core
# attention's RLX_VK_FLASH_ROWS shapes on ViT-S/16 and the d-4096 block, PyTorch beside), `attntests`
# (test_vulkan_half's attention and norm tests), `tctests` (its tensor-core matmul tests), `longab` (long-line argmax/cumsum: the
# work-group passes against RLX_VK_LONG_ROUTE=serial), `tests`. Env: MODELS=resnet50 (or vit_s_16) limits `vision`
# to it, PDT=f16 profiles f16 only, ROUTES= skips the profile stage's matmul-route benches, PN top kernels.
# Each profile's full text is copied to $OUT.
set -uo pipefail
C=$(cd "$(dirname "$0")" && pwd)
P=$C/pack
mkdir -p "$P" && tar xzf "$C/pack.tgz" -C "$P"
dpkg -x "$C"/.device-vk/libvulkan1_*.deb / && ldconfig
export VK_ICD_FILENAMES=$C/.device-vk/nvidia_egl_icd.json
export LD_LIBRARY_PATH=$P/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
want=$(cat "$P/source_dir")
[[ -e "$want" ]] || { mkdir -p "$(dirname "$want")"; ln -sfn "$P/src" "$want"; }
out=${OUT:-/tmp/rlx-device}; mkdir -p "$out"
export PYTHONUNBUFFERED=1
R=$P/rlx
what=${*:-vision generate profile detectors}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
$R devices --backend vulkan 2>&1 | head -4
python3 -c 'import torch, torchvision; print("torch", torch.__version__, "torchvision", torchvision.__version__, "cuDNN", torch.backends.cudnn.version())'
W=/tmp/rlx-gpu-targets
for w in $what; do
  case $w in
    profile)  # per kernel (top PN) and summed per op, last of 3 runs
      for m in resnet50 vit_s_16; do
        dts=("" "--dtype f16"); [[ ${PDT:-} == f16 ]] && dts=("--dtype f16")  # PDT=f16: f16 only
        for dt in "${dts[@]}"; do
          echo "== profile $m batch 32 compiled $dt"
          timeout 200 $R run $W/$m/model.onnx -i image=@$W/$m/x.npy -b vulkan -m compiled --profile --repeat 3 $dt 2> $W/prof.txt >/dev/null
          cp $W/prof.txt "$out/prof_${m}${dt// /_}.txt"
          head -${PN:-16} $W/prof.txt | cut -c1-160
          awk '$1 ~ /^[0-9.]+$/ && NF >= 6 {s[$5] += $1; n[$5]++; t += $1} END {for (o in s) printf "  %-14s %8.3f ms %4d kernels\n", o, s[o], n[o]; printf "  %-14s %8.3f ms\n", "total", t}' $W/prof.txt | sort -k2 -n -r
        done
      done
      for v in ${ROUTES-RLX_VK_COOPMAT=khr RLX_VK_COOPMAT=nv RLX_VK_NO_COOPMAT=1}; do  # the f16 convolutions' matmul route
        for m in resnet50 vit_s_16; do
          echo "$v $m f16: $(env $v $R bench $W/$m/model.onnx --input image=@$W/$m/x.npy --backends vulkan --modes compiled --reps 5 --dtype f16 --format csv 2>/dev/null | tail -1)"
        done
      done
      ;;
    convroutes)  # ResNet-50 f16 per op under each route (kernels_conv_gemm.cpp; env CONVROUTES), same machine
      for v in ${CONVROUTES:-RLX_VK_CONV=default RLX_VK_EPILOGUE=0 RLX_VK_CONV=rows}; do  # A=1,B=2: both set
        echo "== profile resnet50 f16 $v"
        env ${v//,/ } timeout 200 $R run $W/resnet50/model.onnx -i image=@$W/resnet50/x.npy -b vulkan -m compiled --profile --repeat 3 --dtype f16 2> $W/prof.txt >/dev/null
        f=${v//[=,+]/_}; cp $W/prof.txt "$out/prof_resnet50_f16_$f.txt"  # a name the device tool brings back
        head -1 $W/prof.txt | cut -c1-160
        awk '$1 ~ /^[0-9.]+$/ && NF >= 6 {s[$5] += $1; n[$5]++; t += $1} END {for (o in s) printf "  %-14s %8.3f ms %4d kernels\n", o, s[o], n[o]; printf "  %-14s %8.3f ms\n", "total", t}' $W/prof.txt | sort -k2 -n -r
        echo "$v resnet50 f16 bench: $(env ${v//,/ } $R bench $W/resnet50/model.onnx --input image=@$W/resnet50/x.npy --backends vulkan --modes compiled --reps 20 --dtype f16 --format csv 2>/dev/null | tail -1)"
      done
      ;;
    viewsab)  # ViT-S/16 f16 with compiled mode's attention_views pass off (RLX_VK_ATTENTION_VIEWS=0), without the linears' reordering (=2) and on, alternating; then profiles with it off and at 2
      m=vit_s_16
      for i in 1 2 3; do
        for v in 0 2 default; do
          echo "RLX_VK_ATTENTION_VIEWS=$v $m f16 bench: $(RLX_VK_ATTENTION_VIEWS=$v $R bench $W/$m/model.onnx --input image=@$W/$m/x.npy --backends vulkan --modes compiled --reps 20 --dtype f16 --format csv 2>/dev/null | tail -1)"
        done
      done
      for v in 0 2; do
        echo "== profile $m batch 32 compiled --dtype f16 RLX_VK_ATTENTION_VIEWS=$v"
        RLX_VK_ATTENTION_VIEWS=$v timeout 200 $R run $W/$m/model.onnx -i image=@$W/$m/x.npy -b vulkan -m compiled --profile --repeat 3 --dtype f16 2> $W/prof.txt >/dev/null
        cp $W/prof.txt "$out/prof_${m}_f16_views$v.txt"
        head -1 $W/prof.txt | cut -c1-160
        awk '$1 ~ /^[0-9.]+$/ && NF >= 6 {s[$5] += $1; n[$5]++; t += $1} END {for (o in s) printf "  %-14s %8.3f ms %4d kernels\n", o, s[o], n[o]; printf "  %-14s %8.3f ms\n", "total", t}' $W/prof.txt | sort -k2 -n -r
      done
      ;;
    cm2)  # issue 22: the tensor-core matmul, new tile choice against old (RLX_VK_CM2_PICK=old), same call
      python3 $P/src/bench/cm2_bench.py --rlx $R --work $W/cm2 --variants "${CM2V:-new: old:RLX_VK_CM2_PICK=old}" \
        --repeat "${CM2R:-5}" ${CM2ONLY:+--only $CM2ONLY} --dtypes ${CM2DT:-f16 bf16} ${CM2TORCH---torch}
      for v in ${CM2B:-new old:RLX_VK_CM2_PICK=old}; do  # NAME[:ENV=VAL]; rlx bench medians (wall, device)
        e=${v#*:}; [[ $e == "$v" ]] && e=""
        for dt in f16 bf16; do
          echo "$v matmul 4096^3 $dt (median ms, device ms): $(env $e $R bench $P/src/bench/graphs/matmul_4096.json --input a=random:1 --input b=random:2 --dtype $dt --backends vulkan --modes compiled --reps 20 --format csv 2>/dev/null | tail -1 | cut -d, -f4,13)"
        done
        echo "$v decoder block d4096 seq512 f16 (median ms, device ms): $(env $e $R bench $P/src/bench/graphs/decoder_block_4096.json --random-params --input x=random:1 --dtype f16 --backends vulkan --modes compiled --reps 20 --format csv 2>/dev/null | tail -1 | cut -d, -f4,13)"
      done
      python3 $P/src/bench/torch_gpu.py --half --reps 20 | grep -E "4096\^3|block"
      ;;
    attnrows)  # attention_coop_rows.comp's shapes (RLX_VK_FLASH_ROWS=NW:BC, list ROWSV; an item with '=' is its own env, comma-separated) against attention_coop.comp (=0), alternating: ViT-S/16 f16 (run `vision` first) and the d-4096 decoder block f16, benched and profiled; PyTorch's block and scaled_dot_product_attention on both shapes in the same call
      m=vit_s_16; G=$P/src/bench/graphs/decoder_block_4096.json
      for i in 1 2; do
        for v in ${ROWSV:-0 default 8:32 2:64}; do
          e=RLX_VK_FLASH_ROWS=$v; [[ $v == default ]] && e=RLX_VK_FLASH_ROWS=; [[ $v == *=* ]] && e=${v//,/ }
          echo "$e $m f16 bench: $(env $e $R bench $W/$m/model.onnx --input image=@$W/$m/x.npy --backends vulkan --modes compiled --reps 20 --dtype f16 --format csv 2>/dev/null | tail -1)"
          echo "$e decoder block d4096 seq512 f16 (median ms, device ms): $(env $e $R bench $G --random-params --input x=random:1 --dtype f16 --backends vulkan --modes compiled --reps 20 --format csv 2>/dev/null | tail -1 | cut -d, -f4,13)"
        done
      done
      for v in ${ROWSV:-0 default 8:32 2:64}; do
        e=RLX_VK_FLASH_ROWS=$v; [[ $v == default ]] && e=RLX_VK_FLASH_ROWS=; [[ $v == *=* ]] && e=${v//,/ }
        env $e timeout 200 $R run $W/$m/model.onnx -i image=@$W/$m/x.npy -b vulkan -m compiled --profile --repeat 3 --dtype f16 2> $W/prof.txt >/dev/null
        cp $W/prof.txt "$out/prof_${m}_f16_rows${v//[:=,]/_}.txt"
        echo "== profile $m f16 $e: $(awk '$1 ~ /^[0-9.]+$/ && NF >= 6 {s[$5] += $1; n[$5]++; t += $1} END {for (o in s) printf "%s %.3f (%d) ", o, s[o], n[o]; printf "total %.3f", t}' $W/prof.txt)"
        env $e timeout 200 $R run $G --random-params --input x=random:1 --dtype f16 --backend vulkan --mode compiled --profile --repeat 10 2> $W/prof.txt >/dev/null
        cp $W/prof.txt "$out/prof_block4096_f16_rows${v//[:=,]/_}.txt"
        echo "== profile block d4096 f16 $e: $(awk '$1 ~ /^[0-9.]+$/ && NF >= 6 {s[$5] += $1; n[$5]++; t += $1} END {for (o in s) printf "%s %.3f (%d) ", o, s[o], n[o]; printf "total %.3f", t}' $W/prof.txt)"
      done
      python3 $P/src/bench/torch_gpu.py --half --reps 20 | grep -E "block"
      python3 - <<'PY'
import torch, torch.nn.functional as F
def t(fn, n=50):
    for _ in range(5): fn()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize(); s.record()
    for _ in range(n): fn()
    e.record(); torch.cuda.synchronize(); return s.elapsed_time(e) / n
h = torch.float16
with torch.inference_mode():
    q, k, v = (torch.randn(32, 6, 197, 64, device="cuda", dtype=h) for _ in range(3))
    print(f"PyTorch sdpa ViT-S 32x6x197x64 f16: {t(lambda: F.scaled_dot_product_attention(q, k, v)):.4f} ms")
    q = torch.randn(1, 32, 512, 128, device="cuda", dtype=h); k, v = (torch.randn(1, 8, 512, 128, device="cuda", dtype=h) for _ in range(2))
    ke, ve = k.repeat_interleave(4, 1), v.repeat_interleave(4, 1)
    print(f"PyTorch sdpa decoder 1x32x512x128 causal f16 (kv expanded from 8 heads): {t(lambda: F.scaled_dot_product_attention(q, ke, ve, is_causal=True)):.4f} ms")
PY
      ;;
    tctests)  # test_vulkan_half's tensor-core matmul tests alone (matmul_cm2's tile choices, matmul_cm1p)
      timeout 300 $P/test_vulkan_half --gtest_filter='*TensorCore*:*Pipelined*:*Matmul*' 2>&1 | grep -E 'tensor cores|Failure|error|want|tests ran|PASSED|FAILED|SKIPPED|^\[ +(OK|FAILED|SKIPPED)'
      ;;
    attntests)  # the half attention and norm tests alone (the tensor-core kernels' variants print what differs)
      timeout 300 $P/test_vulkan_half --gtest_filter='*Attention*:*Norm*' 2>&1 | grep -E 'differ|Failure|error|tests ran|PASSED|FAILED|^\[ +(OK|FAILED)'
      ;;
    longab)  # long lines (kernels_long.cpp): the GPU's default work-group passes against RLX_VK_LONG_ROUTE=serial (main's walks), alternating, 3 rounds
      for i in 1 2 3; do
        for g in argmax_1m cumsum_1m argmax_16m cumsum_16m; do
          for v in default serial; do
            e=(); [[ $v == serial ]] && e=(RLX_VK_LONG_ROUTE=serial)
            echo "longab $g $v: $(env "${e[@]}" $R bench $P/src/bench/graphs/$g.json --input x=random:1 --backends vulkan --modes lazy,compiled --reps 20 --format csv 2>&1 | tail -2 | cut -d, -f1-8 | tr '\n' ' ')"
          done
        done
      done
      ;;
    tests)
      for t in "test_golden --gtest_filter=Cases/Golden.*vulkan*" "test_vulkan --gtest_filter=-VulkanValidation.*" test_vulkan_half; do
        echo "$t: $(timeout 300 $P/$t --gtest_brief=1 2>&1 | grep -E 'tests ran|PASSED|FAILED' | tr '\n' ' ')"
      done
      for t in "$P"/test_*; do  # what --pack's PACK_EXTRA_TESTS added
        case ${t##*/} in test_golden|test_vulkan|test_vulkan_half) continue ;; esac
        echo "${t##*/}: $(timeout 300 $t --gtest_brief=1 2>&1 | grep -E 'tests ran|PASSED|FAILED|Failure' | tr '\n' ' ')"
      done
      ;;
    *) timeout ${TL:-400} python3 $P/src/bench/gpu_targets.py --rlx $R --work $W --out "$out" ${MODELS:+--models $MODELS} $w ;;
  esac
done 2>&1 | tee "$out/log.txt"
