# NaN and ±inf propagation (tests/numerics/nan_inf.py): every op family on NaN, ±inf and -0.0
# against PyTorch / NumPy, in every mode on the CPU and, where built, on Vulkan.
set(RLX_NUMERICS_BACKENDS cpu)
if(TARGET rlx_vulkan)
  set(RLX_NUMERICS_BACKENDS cpu,vulkan)
endif()
add_test(NAME numerics_nan_inf COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/numerics/nan_inf.py
         --rlx $<TARGET_FILE:rlx> --backends ${RLX_NUMERICS_BACKENDS})
set_tests_properties(numerics_nan_inf PROPERTIES TIMEOUT 300)
