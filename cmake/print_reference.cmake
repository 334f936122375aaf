# Writes `TALLYD --print-reference=NAME` into OUTPUT: a generated reference
# (docs/reference/*.md), the man page tallyd.conf(5) or tallyd's bash
# completion.
#   cmake -DTALLYD=... -DNAME=man -DOUTPUT=... -P print_reference.cmake
execute_process(
  COMMAND ${TALLYD} --print-reference=${NAME}
  OUTPUT_FILE ${OUTPUT}
  RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "${TALLYD} --print-reference=${NAME} failed (${result})")
endif()
