# cpu::gemm (lib/backends/cpu/gemm.h) against a plain reference loop
rlx_add_test(test_gemm SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_gemm.cpp LIBS rlx_cpu)
# The thread-count check once more with a pool size that differs from the core count.
add_test(NAME Threads.NumThreads3 COMMAND test_gemm --gtest_filter=Threads.*)
set_tests_properties(Threads.NumThreads3 PROPERTIES ENVIRONMENT "RLX_NUM_THREADS=3")
# rlx's large-M kernel over prepacked weights (opt-in, RLX_GEMM_WIDE=1).
add_test(NAME Gemm.WideKernel COMMAND test_gemm --gtest_filter=Gemm.Packed*:Gemm.Custom*)
set_tests_properties(Gemm.WideKernel PROPERTIES ENVIRONMENT "RLX_GEMM_WIDE=1;RLX_GEMM_DNNL=0")
# Prepacked products of more than 16 rows without oneDNN (OpenBLAS, weights in place).
add_test(NAME Gemm.PackedWithoutOneDnn COMMAND test_gemm --gtest_filter=Gemm.Packed*:Gemm.Custom*:Threads.*)
set_tests_properties(Gemm.PackedWithoutOneDnn PROPERTIES ENVIRONMENT "RLX_GEMM_DNNL=0")
