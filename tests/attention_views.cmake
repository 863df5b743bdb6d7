# compiled mode's attention_views pass: the optimised graph (no backend), then every mode on the
# CPU and, where built, Vulkan (lavapipe: the views copied through scratch), against a plain loop.
rlx_add_test(test_attention_views SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_attention_views.cpp LIBS rlx_runtime)
add_dependencies(test_attention_views rlx)
