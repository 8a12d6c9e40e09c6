# One CTest check of the `blockfuse` CLI (no GPU needed): runs CLI with ARGS ('|'-separated), and
# passes when it exits with EXIT and its output (stdout and stderr together) matches the regular
# expression MATCH. Usage errors must exit 2 and name what was wrong.
#   cmake -DCLI=path/to/blockfuse "-DARGS=bench|nope" -DEXIT=2 "-DMATCH=unknown command" -P expect_cli.cmake
string(REPLACE "|" ";" args "${ARGS}")
execute_process(COMMAND "${CLI}" ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(all "${out}${err}")
if(NOT rc STREQUAL "${EXIT}")
  message(FATAL_ERROR "blockfuse ${args}: exit status ${rc}, expected ${EXIT}; output:\n${all}")
endif()
if(NOT all MATCHES "${MATCH}")
  message(FATAL_ERROR "blockfuse ${args}: output does not match \"${MATCH}\":\n${all}")
endif()
message(STATUS "blockfuse ${args}: exit ${rc}, output matches \"${MATCH}\"")
