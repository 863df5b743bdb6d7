# Issue 31: the capacity KV cache's pieces (lib/runtime/kv_cache.h, Session::input_bytes_changed).
rlx_add_test(test_kv_cache SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_kv_cache.cpp LIBS rlx_runtime)
# The cache on the device with every transfer through staging (RLX_VK_FORCE_STAGING: lavapipe's
# memory is mapped, a discrete GPU's is not): the zeros by vkCmdFillBuffer, the rows moved and the
# growth copied by vkCmdCopyBuffer.
if(TARGET rlx_vulkan)
  add_test(NAME kv_cache_vulkan_staging COMMAND test_kv_cache --gtest_filter=KvCache.StorageOnTheExecutor*:KvCache.ConcatAppends*)
  set_tests_properties(kv_cache_vulkan_staging PROPERTIES ENVIRONMENT "RLX_VK_FORCE_STAGING=1")
endif()
