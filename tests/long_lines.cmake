# Ops along long lines (topk, argmax/argmin, cumsum, min/prod; issue 30): every mode on the CPU
# and, where built, Vulkan (lavapipe: lines longer than one invocation may walk), against loops.
rlx_add_test(test_long_lines SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_long_lines.cpp LIBS rlx_runtime)
add_dependencies(test_long_lines rlx)
