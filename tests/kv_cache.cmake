# Issue 31: the capacity KV cache's pieces (lib/runtime/kv_cache.h, Session::input_bytes_changed).
rlx_add_test(test_kv_cache SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_kv_cache.cpp LIBS rlx_runtime)
