# TALLY_SANITIZE: builds everything with sanitizers, e.g.
#   -DTALLY_SANITIZE=address,undefined   (AddressSanitizer + UBSan)
#   -DTALLY_SANITIZE=thread              (ThreadSanitizer)
# The value goes to -fsanitize= as given (GCC or Clang). Any UBSan finding
# stops the program (no recovery), so a test under it fails instead of
# printing and passing. The presets in CMakePresets.json use it, and their
# test presets set the runtime options (halt_on_error).
#
# Included from the top-level CMakeLists.txt before any target: the options
# apply to every target. For thread, every executable also gets
# tsan_absl_sync.cc (see there: Debian's Abseil is not instrumented, and
# ThreadSanitizer would otherwise not see absl::Mutex at all).
set(TALLY_SANITIZE "" CACHE STRING
    "Sanitizers to build with, as -fsanitize= takes them (address,undefined or thread); empty: none")

if(TALLY_SANITIZE)
  add_compile_options(-fsanitize=${TALLY_SANITIZE} -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${TALLY_SANITIZE})
  if(TALLY_SANITIZE MATCHES "undefined")
    add_compile_options(-fno-sanitize-recover=undefined)
    add_link_options(-fno-sanitize-recover=undefined)
  endif()
endif()

# tally_sanitize_executables(): after every add_subdirectory. With thread,
# links cmake/tsan_absl_sync.cc into each executable and sends its calls to
# absl's synchronization through it (--wrap), names read from the file.
function(tally_sanitize_executables)
  if(NOT TALLY_SANITIZE MATCHES "thread")
    return()
  endif()
  set(shim ${PROJECT_SOURCE_DIR}/cmake/tsan_absl_sync.cc)
  # The mangled inline namespace of the installed Abseil: "debian3" in
  # Debian 12's is mangled "7debian3".
  find_file(TALLY_ABSL_OPTIONS_H absl/base/options.h REQUIRED)
  file(STRINGS ${TALLY_ABSL_OPTIONS_H} ns_line
       REGEX "^#define ABSL_OPTION_INLINE_NAMESPACE_NAME ")
  string(REGEX REPLACE ".* ([A-Za-z0-9_]+)$" "\\1" ns "${ns_line}")
  if(NOT ns)
    message(FATAL_ERROR "TALLY_SANITIZE=thread: no inline namespace in ${TALLY_ABSL_OPTIONS_H}")
  endif()
  string(LENGTH "${ns}" ns_length)
  set(ns_mangled "${ns_length}${ns}")
  # The wrapped symbols: each TALLY_WRAP("N" or "NK", "rest") of the file,
  # adjacent string literals joined first.
  file(READ ${shim} text)
  string(REGEX REPLACE "\"[ \n]*\"" "" text "${text}")
  string(REGEX MATCHALL "TALLY_WRAP\\([ \n]*\"NK?\",[ \n]*\"[^\"]+\"\\)" wraps "${text}")
  set(wrap_options)
  foreach(wrap IN LISTS wraps)
    string(REGEX REPLACE "TALLY_WRAP\\([ \n]*\"(NK?)\",[ \n]*\"([^\"]+)\"\\)"
           "_Z\\14absl${ns_mangled}\\2" symbol "${wrap}")
    list(APPEND wrap_options "LINKER:--wrap=${symbol}")
  endforeach()
  # Every TALLY_WRAP( but the #define's must have been read.
  string(REGEX MATCHALL "TALLY_WRAP\\(" all "${text}")
  list(LENGTH all expected)
  math(EXPR expected "${expected} - 1")
  list(LENGTH wrap_options count)
  if(NOT count EQUAL expected)
    message(FATAL_ERROR "TALLY_SANITIZE=thread: read ${count} of the ${expected} wrapped symbols of ${shim}")
  endif()
  add_library(tally_tsan_absl_sync OBJECT ${shim})
  target_compile_definitions(tally_tsan_absl_sync PRIVATE
                             "TALLY_ABSL_NS=\"${ns_mangled}\"")
  target_link_libraries(tally_tsan_absl_sync PRIVATE absl::synchronization)
  # Every executable target of the project, in every directory.
  set(dirs ${PROJECT_SOURCE_DIR})
  while(dirs)
    list(POP_FRONT dirs dir)
    get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
    list(APPEND dirs ${subdirs})
    get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
    foreach(target IN LISTS targets)
      get_target_property(type ${target} TYPE)
      if(type STREQUAL "EXECUTABLE")
        target_sources(${target} PRIVATE $<TARGET_OBJECTS:tally_tsan_absl_sync>)
        target_link_options(${target} PRIVATE ${wrap_options})
        add_dependencies(${target} tally_tsan_absl_sync)
      endif()
    endforeach()
  endwhile()
endfunction()
