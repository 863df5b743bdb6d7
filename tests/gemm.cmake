# cpu::gemm (lib/backends/cpu/gemm.h) against a plain reference loop
rlx_add_test(test_gemm SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_gemm.cpp LIBS rlx_cpu)
