# Compiled mode's pattern rewrites (lib/passes/patterns.cpp): rewritten forms, near misses, answers.
rlx_add_test(test_passes SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_passes.cpp LIBS rlx_runtime)
