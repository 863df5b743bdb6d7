# The persistent compile cache (issue 11): tests/test_cache.cpp
rlx_add_test(test_cache SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_cache.cpp LIBS rlx_runtime PkgConfig::SODIUM)  # libsodium: the test forges MACs
add_dependencies(test_cache rlx)
