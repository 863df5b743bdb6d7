# Batch jobs (issue 27): rlx run --batch through the real binary, GNU parallel shards, SIGKILL
# and rerun, a worker through a pipe (tests/batch_tests.py).
add_test(NAME batch_jobs COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/batch_tests.py --rlx $<TARGET_FILE:rlx>)
set_tests_properties(batch_jobs PROPERTIES TIMEOUT 300 PROCESSORS 2)
