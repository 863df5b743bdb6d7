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
