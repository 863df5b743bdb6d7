# Command-line papercuts through the real binary (issue 11): tests/test_cli.cpp
rlx_add_test(test_cli SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/test_cli.cpp LIBS rlx_io)
add_dependencies(test_cli rlx)
# Output that scripts can trust and examples that run (issue 21): every README CLI example and
# every `rlx COMMAND --help` example runs; --json stdout stays one JSON document, errors included.
add_test(NAME cli_scripts COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/cli_scripts.py --rlx $<TARGET_FILE:rlx>)
set_tests_properties(cli_scripts PROPERTIES TIMEOUT 600 PROCESSORS 2)
# rlx quantize (issue 19, docs/quantize.md): weights, runs and reported errors against NumPy.
add_test(NAME quantize_cli COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/quantize_tests.py --rlx $<TARGET_FILE:rlx>)
set_tests_properties(quantize_cli PROPERTIES TIMEOUT 300)
