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
# cpu::qgemm (exact 8-bit integer GEMM) on every ISA path the CPU runs, against int64 loops;
# then once more with RLX_CPU_ISA capping the path the default dispatch picks.
rlx_add_test(test_qgemm SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_qgemm.cpp LIBS rlx_cpu)
# The f32 one-row 4-bit kernels where the integer one (nbits4_row1_bfp) would run: RLX_NBITS_F32.
add_test(NAME Nbits4.F32 COMMAND test_qgemm --gtest_filter=Nbits4.*)
set_tests_properties(Nbits4.F32 PROPERTIES ENVIRONMENT "RLX_NBITS_F32=1")
add_test(NAME Nbits4.F32_avx2 COMMAND test_qgemm --gtest_filter=Nbits4.*)
set_tests_properties(Nbits4.F32_avx2 PROPERTIES ENVIRONMENT "RLX_NBITS_F32=1;RLX_CPU_ISA=avx2")
foreach(isa base avx2 avxvnni)
  add_test(NAME Qgemm.Isa_${isa} COMMAND test_qgemm --gtest_filter=Qgemm.SingleThread*:MinMax.*:Nbits4Int8.*:Nbits4.*)
  set_tests_properties(Qgemm.Isa_${isa} PROPERTIES ENVIRONMENT "RLX_CPU_ISA=${isa}")
endforeach()
