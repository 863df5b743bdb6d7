# The narrow CPU paths (issue 26): RLX_CPU_ISA caps every kernel choice (rlx's GEMM and fused
# kernels, the int8 products, OpenBLAS's kernel set, oneDNN's code generation), so the AVX2 and
# baseline x86-64 paths run on any machine. The golden suite in every mode under both caps here,
# and ONNX's node tests in compiled mode under the baseline (tests/onnx.cmake). (Not under the
# sanitizers: the plain suites already run there; this is about the kernels.)
if(NOT RLX_SANITIZE)
  foreach(isa avx2 base)
    add_test(NAME goldens_isa_${isa}
             COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/bench/check_goldens_all_modes.py $<TARGET_FILE:rlx> eager,lazy,compiled
             WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
    set_tests_properties(goldens_isa_${isa} PROPERTIES ENVIRONMENT "RLX_CPU_ISA=${isa}" TIMEOUT 600)
  endforeach()
endif()
