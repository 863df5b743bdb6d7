# The convolution family: random geometries against reference loops on every backend, load-time refusals.
rlx_add_test(test_conv SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_conv.cpp LIBS rlx_runtime)
# The 3-D forms (issue 30): random geometries in every mode on every backend, load-time refusals.
rlx_add_test(test_conv3d SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_conv3d.cpp LIBS rlx_runtime)
# Again with the CPU kernels' vector paths capped (the separable pools' AVX2 loops and the
# GEMM's AVX-512 kernels, then the scalar ones), and with temporal convs on the im2col tiles.
foreach(env "RLX_CPU_ISA=avx2" "RLX_CPU_ISA=base" "RLX_CONV_TEMPORAL=0")
  string(REGEX REPLACE "[^A-Za-z0-9]" "_" tag "${env}")
  add_test(NAME Conv3d.${tag} COMMAND test_conv3d --gtest_filter=Cpu*:*cpu:Conv3dRefusals*)
  set_tests_properties(Conv3d.${tag} PROPERTIES ENVIRONMENT "${env}")
endforeach()
# conv2d (1-D and 2-D) and conv3d through oneDNN in compiled CPU plans: odd geometries and every
# epilogue against a reference loop; again with AVX2 (nChw8c), with the baseline ISA (oneDNN off),
# switched off, with the per-shape rule off (RLX_CONV_DNNL=all: oneDNN runs every shape it takes)
# and with Winograd forced on every 3x3 stride-1 shape.
rlx_add_test(test_dnnl_conv SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_dnnl_conv.cpp LIBS rlx_runtime)
foreach(env "RLX_CPU_ISA=avx2" "RLX_CPU_ISA=base" "RLX_CONV_DNNL=0" "RLX_CONV_DNNL=all" "RLX_CONV_WINOGRAD=1")
  string(REGEX REPLACE "[^A-Za-z0-9]" "_" tag "${env}")
  add_test(NAME DnnlConv.${tag} COMMAND test_dnnl_conv)
  set_tests_properties(DnnlConv.${tag} PROPERTIES ENVIRONMENT "${env}")
endforeach()
# Tensors kept blocked between convolutions of a compiled CPU plan (residual adds, pools, a pad,
# global means, concats, depthwise convs and squeeze-excitation) against reference loops; again
# with blocks of 8, with oneDNN off, and with the activations in rlx's epilogues (no post-ops).
rlx_add_test(test_blocked_layout SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_blocked_layout.cpp LIBS rlx_runtime)
foreach(env "RLX_CPU_ISA=avx2" "RLX_CPU_ISA=base" "RLX_CONV_DNNL=0" "RLX_CONV_POSTOPS=0")
  string(REGEX REPLACE "[^A-Za-z0-9]" "_" tag "${env}")
  add_test(NAME BlockedLayout.${tag} COMMAND test_blocked_layout)
  set_tests_properties(BlockedLayout.${tag} PROPERTIES ENVIRONMENT "${env}")
endforeach()
