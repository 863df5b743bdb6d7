# tensor file I/O: .npy, safetensors, atomic files, tensor SPECs
rlx_add_test(test_io SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_io.cpp LIBS rlx_io)
