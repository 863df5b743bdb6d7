# The convolution family: random geometries against reference loops on every backend, load-time refusals.
rlx_add_test(test_conv SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_conv.cpp LIBS rlx_runtime)
# The 3-D forms (issue 30): random geometries in every mode on every backend, load-time refusals.
rlx_add_test(test_conv3d SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_conv3d.cpp LIBS rlx_runtime)
