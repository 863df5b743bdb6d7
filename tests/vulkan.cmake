# Vulkan executor tests (lavapipe in CI). rlx_runtime provides Executor's base
# class methods (record/replay defaults live in runtime/backends.cpp).
if(TARGET rlx_vulkan)
  rlx_add_test(test_vulkan SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_vulkan.cpp
               ${CMAKE_CURRENT_SOURCE_DIR}/test_vulkan_pipelines.cpp LIBS rlx_vulkan rlx_runtime)
endif()
if(TARGET rlx_vulkan)
  rlx_add_test(test_vulkan_half SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_vulkan_half.cpp LIBS rlx_vulkan rlx_runtime)
endif()
