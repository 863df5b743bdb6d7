# Ops along long lines (topk, argmax/argmin, cumsum, min/prod; issue 30): every mode on the CPU
# and, where built, Vulkan (lavapipe: lines longer than one invocation may walk), against loops.
rlx_add_test(test_long_lines SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_long_lines.cpp LIBS rlx_runtime)
add_dependencies(test_long_lines rlx)
# The golden cases of argmax/argmin, cumsum, min and prod on Vulkan through the long-line passes
# (RLX_VK_LONG_FROM=1: every line longer than one element; kernels_long.cpp), whose long lines
# only test_long_lines reaches otherwise: tiny lines, single partial chunks, every mode. Both
# routes (RLX_VK_LONG_ROUTE): the work-group passes (GPUs' default) and the serial walks
# (lavapipe's default).
foreach(route wg serial)
  set(name goldens_vulkan_long_route)
  if(route STREQUAL "serial")
    set(name goldens_vulkan_long_route_serial)
  endif()
  add_test(NAME ${name}
           COMMAND test_golden "--gtest_filter=*vulkan_op_arg*:*vulkan_op_cumsum*:*vulkan_op_min*:*vulkan_op_prod*"
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "RLX_VK_LONG_FROM=1;RLX_VK_LONG_ROUTE=${route}" TIMEOUT 300)
endforeach()
