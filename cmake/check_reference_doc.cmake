# Checks that a committed reference document is what the code generates:
# runs `TALLYD --print-reference=NAME` and compares its output with
# SOURCE_DIR/docs/reference/NAME.md. Run by ctest (node/CMakeLists.txt).
#   cmake -DTALLYD=... -DNAME=metrics -DSOURCE_DIR=... -P check_reference_doc.cmake
set(committed ${SOURCE_DIR}/docs/reference/${NAME}.md)
execute_process(
  COMMAND ${TALLYD} --print-reference=${NAME}
  OUTPUT_VARIABLE generated
  RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "${TALLYD} --print-reference=${NAME} failed (${result})")
endif()
if(NOT EXISTS ${committed})
  set(expected "")
else()
  file(READ ${committed} expected)
endif()
if(NOT generated STREQUAL expected)
  message(FATAL_ERROR
    "docs/reference/${NAME}.md is not what the code generates (a status "
    "field or setting changed). Regenerate it:\n"
    "  cmake --build BUILD_DIR --target tally_reference_docs\n"
    "(or: tallyd --print-reference=${NAME} > docs/reference/${NAME}.md)\n"
    "and commit it.")
endif()
