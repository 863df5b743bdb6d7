# real dtypes in memory: f16/bf16 products (half_gemm), zero-copy host buffers, exact integers
rlx_add_test(test_storage SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_storage.cpp LIBS rlx_runtime)
