# Robustness: hostile and broken inputs (library level and through the rlx binary). docs/errors.md
rlx_add_test(test_errors SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_errors.cpp LIBS rlx_runtime)
add_dependencies(test_errors rlx)
