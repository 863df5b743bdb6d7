# Compiled mode's pattern rewrites (lib/passes/patterns.cpp): rewritten forms, near misses, answers.
# Test names carry the prefix "passes/" (ctest -R passes).
rlx_add_test(test_passes SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_passes.cpp LIBS rlx_runtime PREFIX "passes/")
# The same rewrites on --dtype f16/bf16 graphs: same fused plan as f32, answers within half tolerances.
rlx_add_test(test_passes_half SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_passes_half.cpp LIBS rlx_runtime PREFIX "passes/")
# Sibling matmul_nbits over one activation merged into one product (lib/passes/merge_products.cpp):
# every mode, CPU and Vulkan where present, against a double loop over the dequantized weights.
rlx_add_test(test_merge_products SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_merge_products.cpp LIBS rlx_runtime PREFIX "passes/")
