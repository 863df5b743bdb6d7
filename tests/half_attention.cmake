# attention over f16/bf16 keys and values read in place (no f32 copy of the cache), against a
# double reference loop; then once more at each lower instruction-set level: RLX_HALF_ISA caps
# half_gemm's level, and RLX_CPU_ISA caps it too (avx2: f16c, base: plain loops).
rlx_add_test(test_half_attention SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_half_attention.cpp LIBS rlx_runtime)
foreach(cap "RLX_HALF_ISA=f16c" "RLX_HALF_ISA=plain" "RLX_CPU_ISA=avx2" "RLX_CPU_ISA=base")
  string(REGEX REPLACE ".*=" "" lvl "${cap}")
  string(REGEX REPLACE "_ISA=.*" "" who "${cap}")
  add_test(NAME HalfAttention.${who}_${lvl} COMMAND test_half_attention)
  set_tests_properties(HalfAttention.${who}_${lvl} PROPERTIES ENVIRONMENT "${cap}")
endforeach()
