# The convolution family: random geometries against reference loops on every backend, load-time refusals.
rlx_add_test(test_conv SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_conv.cpp LIBS rlx_runtime)
