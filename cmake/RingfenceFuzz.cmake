# libFuzzer targets, built with clang++ (the main build uses g++, whose objects libFuzzer
# cannot instrument), plus a ctest test that runs each for a bounded time.
#
#   rf_fuzz_target(NAME <name> LAYER <layer> SOURCES <files...> [LIBS <-lfoo...>] [SEEDS <dir>] [SECONDS <s>])
#
# SOURCES are compiled together with -fsanitize=fuzzer,address,undefined; one of them
# defines LLVMFuzzerTestOneInput. Include paths: the repository root (and the system's,
# e.g. nlohmann-json). The binary lands in <build>/bin/fuzz/<name>. The test (labels
# <layer>;fuzz) runs it for SECONDS (default 15) on a corpus under the build tree, seeded
# from SEEDS; new inputs never go into the source tree. clang++ is REQUIRED: configuring
# without it is an error, so the test suite never silently shrinks (scripts/setup installs
# it). Safe to include() more than once. -DRINGFENCE_FUZZ=OFF (scripts/gpu-check on a GPU machine
# that has no clang) defines no fuzz target at all, and says so.
include_guard(GLOBAL)

option(RINGFENCE_FUZZ "libFuzzer targets and their tests (need clang++)" ON)
if(NOT RINGFENCE_FUZZ)
  message(STATUS "ringfence: fuzz targets OFF (RINGFENCE_FUZZ=OFF)")
  function(rf_fuzz_target)
  endfunction()
  return()
endif()

find_program(RF_CLANGXX NAMES clang++ clang++-14)
if(NOT RF_CLANGXX)
  message(FATAL_ERROR
    "ringfence: clang++ not found; the libFuzzer tests need it. Install the Debian "
    "packages clang and libclang-rt-14-dev (scripts/setup does), or pass "
    "-DRF_CLANGXX=/path/to/clang++.")
endif()

function(rf_fuzz_target)
  cmake_parse_arguments(F "" "NAME;LAYER;SECONDS;SEEDS" "SOURCES;LIBS" ${ARGN})
  if(NOT F_SECONDS)
    set(F_SECONDS 15)
  endif()
  set(out ${CMAKE_BINARY_DIR}/bin/fuzz/${F_NAME})
  set(srcs "")
  set(deps "")
  foreach(s ${F_SOURCES})
    get_filename_component(abs ${s} ABSOLUTE)
    list(APPEND srcs ${abs})
    # Headers next to each source: a change there rebuilds the fuzzer too.
    get_filename_component(dir ${abs} DIRECTORY)
    file(GLOB hdrs ${dir}/*.h)
    list(APPEND deps ${abs} ${hdrs})
  endforeach()
  list(REMOVE_DUPLICATES deps)
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/bin/fuzz
    COMMAND ${RF_CLANGXX} -std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined
            -I${PROJECT_SOURCE_DIR} ${srcs} ${F_LIBS} -o ${out}
    DEPENDS ${deps}
    COMMENT "Building libFuzzer target ${F_NAME} with clang++"
    VERBATIM)
  add_custom_target(${F_NAME} ALL DEPENDS ${out})
  set(corpus ${CMAKE_BINARY_DIR}/fuzz/${F_NAME}-corpus)
  file(MAKE_DIRECTORY ${corpus})
  set(seed_args "")
  if(F_SEEDS)
    get_filename_component(seeds ${F_SEEDS} ABSOLUTE)
    set(seed_args ${seeds})
  endif()
  add_test(NAME ${F_NAME}
           COMMAND ${out} -max_total_time=${F_SECONDS} -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
                   ${corpus} ${seed_args})
  math(EXPR limit "${F_SECONDS} + 60")
  set_tests_properties(${F_NAME} PROPERTIES LABELS "${F_LAYER};fuzz" TIMEOUT ${limit})
endfunction()
