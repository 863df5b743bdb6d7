# Compiled mode's pattern rewrites (lib/passes/patterns.cpp): rewritten forms, near misses, answers.
# Test names carry the prefix "passes/" (ctest -R passes).
add_executable(test_passes ${CMAKE_CURRENT_SOURCE_DIR}/test_passes.cpp)
target_link_libraries(test_passes PRIVATE rlx_runtime GTest::gtest GTest::gtest_main)
target_compile_definitions(test_passes PRIVATE RLX_SOURCE_DIR="${CMAKE_SOURCE_DIR}" RLX_BINARY="$<TARGET_FILE:rlx>")
gtest_discover_tests(test_passes WORKING_DIRECTORY ${CMAKE_SOURCE_DIR} DISCOVERY_TIMEOUT 60 TEST_PREFIX "passes/")
set_property(GLOBAL APPEND PROPERTY RLX_GTEST_TARGETS test_passes)
