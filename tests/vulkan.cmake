# Vulkan executor tests (lavapipe in CI). rlx_runtime provides Executor's base
# class methods (record/replay defaults live in runtime/backends.cpp).
if(TARGET rlx_vulkan)
  rlx_add_test(test_vulkan SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_vulkan.cpp
               ${CMAKE_CURRENT_SOURCE_DIR}/test_vulkan_pipelines.cpp LIBS rlx_vulkan rlx_runtime)
endif()
if(TARGET rlx_vulkan)
  rlx_add_test(test_vulkan_half SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_vulkan_half.cpp LIBS rlx_vulkan rlx_runtime)
endif()
# Issue 19: i8/u8 tensors as bytes (data movement, matmul_nbits gemv and general kernels,
# matmul_integer at unaligned offsets, 1 byte per u8 element) against NumPy, on the CPU and,
# where `rlx devices` lists one, Vulkan; every mode.
add_test(NAME vulkan_bytes COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/vulkan_bytes.py --rlx $<TARGET_FILE:rlx>)
set_tests_properties(vulkan_bytes PROPERTIES TIMEOUT 300)
# Issue 22: the committed prebuilt SPIR-V (shaders/prebuilt/) is what its MANIFEST says, built
# from the GLSL sources as they are now (no GPU or glslang needed).
add_test(NAME prebuilt_spirv COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/prebuilt_spirv.sh --check)
# Issue 30: tensors larger than one storage-buffer binding, made testable without large tensors by
# RLX_VK_MAX_BINDING_BYTES=65536 (matmul/linear, batched products, elementwise and fused kernels,
# copies, conv/pool, norms, softmax, reductions, embedding split into parts; an op that cannot be
# split refused by name) against NumPy in every mode, on the CPU and on Vulkan where `rlx devices`
# lists one; plus 88 golden cases of those ops on Vulkan under a 4096-byte limit (lazy mode).
add_test(NAME vulkan_big COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/vulkan_big.py --rlx $<TARGET_FILE:rlx>)
set_tests_properties(vulkan_big PROPERTIES TIMEOUT 300)
