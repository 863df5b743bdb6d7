# Command-line papercuts through the real binary (issue 11): tests/test_cli.cpp
rlx_add_test(test_cli SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_cli.cpp LIBS rlx_io)
add_dependencies(test_cli rlx)
