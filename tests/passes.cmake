# Compiled mode's pattern rewrites (lib/passes/patterns.cpp): rewritten forms, near misses, answers.
# Test names carry the prefix "passes/" (ctest -R passes).
rlx_add_test(test_passes SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_passes.cpp LIBS rlx_runtime PREFIX "passes/")
