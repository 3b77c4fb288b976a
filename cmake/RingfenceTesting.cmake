# Test helpers. Every test carries its layer's label (core, kernels, comm, elastic, ckpt,
# ddp, models) so `ctest -L comm` runs one layer; unit tests also carry `unit`, which is
# the set scripts/test runs a second time under ASan + UBSan.
#
#   rf_unit_test(NAME <name> LAYER <layer> SOURCES <files...> [LIBS <targets...>] [TIMEOUT s]
#                [SKIPPABLE <ctest name>=<doctest -tc filter>...])
#     A doctest executable; built into build/bin/tests/. SKIPPABLE cases run as their own
#     entries, reported skipped (exit 77) where they cannot run (tests/skip.h).
#   rf_integration_test(NAME <name> LAYER <layer> COMMAND <cmd...> [TIMEOUT s])
#     Any command (multi-process tests, scripts); labelled `integration`.
# `rf_unit_tests` builds every unit-test executable and nothing else: the sanitizer pass
# of scripts/test builds only this target.
if(NOT TARGET rf_unit_tests)
  add_custom_target(rf_unit_tests)
endif()

function(rf_unit_test)
  cmake_parse_arguments(T "" "NAME;LAYER;TIMEOUT" "SOURCES;LIBS;SKIPPABLE" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE doctest::doctest rf_test_main ${T_LIBS} rf_flags)
  set_target_properties(${T_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin/tests)
  add_dependencies(rf_unit_tests ${T_NAME})
  # SKIPPABLE <ctest name>=<doctest -tc filter>...: cases that may call rf::test::skip
  # (tests/skip.h) each run as their own entry, skipped (exit 77) where they cannot run;
  # the executable's main entry leaves them out.
  set(filters "")
  foreach(c ${T_SKIPPABLE})
    string(REPLACE "=" ";" pair "${c}")
    list(GET pair 0 test_name)
    list(GET pair 1 filter)
    add_test(NAME ${test_name} COMMAND ${T_NAME} --test-case=${filter})
    set_tests_properties(${test_name} PROPERTIES LABELS "${T_LAYER};unit" TIMEOUT ${T_TIMEOUT}
                         SKIP_RETURN_CODE 77)
    list(APPEND filters "${filter}")
  endforeach()
  if(filters)
    list(JOIN filters "," excluded)
    add_test(NAME ${T_NAME} COMMAND ${T_NAME} --test-case-exclude=${excluded})
  else()
    add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  endif()
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LAYER};unit" TIMEOUT ${T_TIMEOUT})
endfunction()

function(rf_integration_test)
  cmake_parse_arguments(T "" "NAME;LAYER;TIMEOUT" "COMMAND" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_test(NAME ${T_NAME} COMMAND ${T_COMMAND})
  # Integration tests start processes and some assert detection times (D1: 100 ms), so
  # they never share the two cores with another test: ctest runs them one at a time.
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LAYER};integration" TIMEOUT ${T_TIMEOUT}
                       RUN_SERIAL TRUE)
endfunction()

add_library(rf_test_main STATIC ${PROJECT_SOURCE_DIR}/tests/doctest_main.cpp)
target_link_libraries(rf_test_main PUBLIC doctest::doctest rf_flags)
target_include_directories(rf_test_main PUBLIC ${PROJECT_SOURCE_DIR})

# rf_gpu_test(NAME <name> LAYER <layer> SOURCES <files...> [LIBS <targets...>]
#             CASES <ctest name>=<doctest -tc filter>... [TIMEOUT s])
#   A doctest executable for a GPU (tests/gpu_main.cpp): one ctest entry per CASES item,
#   labelled `gpu` and its layer. Without a GPU each exits 77 after printing why, and
#   ctest reports it as skipped (SKIP_RETURN_CODE 77), never as passed. Only in builds
#   with CUDA; not `unit` (the sanitizer pass does not build them).
function(rf_gpu_test)
  cmake_parse_arguments(T "" "NAME;LAYER;TIMEOUT" "SOURCES;LIBS;CASES" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_executable(${T_NAME} ${PROJECT_SOURCE_DIR}/tests/gpu_main.cpp ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE doctest::doctest rf_core_cuda ${T_LIBS} rf_flags)
  set_target_properties(${T_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin/tests)
  foreach(c ${T_CASES})
    string(REPLACE "=" ";" pair "${c}")
    list(GET pair 0 test_name)
    list(GET pair 1 filter)
    add_test(NAME ${test_name} COMMAND ${T_NAME} --test-case=${filter})
    set_tests_properties(${test_name} PROPERTIES LABELS "${T_LAYER};gpu" TIMEOUT ${T_TIMEOUT} SKIP_RETURN_CODE 77)
  endforeach()
endfunction()

# rf_gpu_program_test(NAME <name> LAYER <layer> COMMAND <cmd...> [TIMEOUT s])
#   A command (a script running the programs on a GPU), labelled `gpu` and its layer. Like
#   rf_gpu_test's entries it prints "SKIPPED: no GPU: <reason>" and exits 77 without a GPU
#   (ctest: skipped, never passed); like an integration test it runs alone (RUN_SERIAL:
#   its processes share the GPU and the cores with nobody). Only in builds with CUDA.
function(rf_gpu_program_test)
  cmake_parse_arguments(T "" "NAME;LAYER;TIMEOUT" "COMMAND" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_test(NAME ${T_NAME} COMMAND ${T_COMMAND})
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LAYER};gpu" TIMEOUT ${T_TIMEOUT}
                       SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
endfunction()
