# The ONNX-style ops: schema vs registry, run-time and load-time errors, compiled-mode passes.
rlx_add_test(test_ops SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_ops.cpp LIBS rlx_runtime)
add_dependencies(test_ops rlx)
