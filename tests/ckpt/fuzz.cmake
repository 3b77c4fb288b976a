# The libFuzzer target for the safetensors reader. The main build uses g++, which has no
# libFuzzer, so when clang++ is found we compile the reader's sources again with clang++
# -fsanitize=fuzzer,address,undefined in a custom command, and a ctest test runs the fuzzer
# for a bounded time from a seed corpus. Without clang++ the target and test are absent
# (scripts/setup installs clang and libclang-rt-14-dev, so CI has them).
find_program(RF_CLANGXX NAMES clang++-14 clang++)
if(RF_CLANGXX)
  set(_fuzz_bin ${CMAKE_BINARY_DIR}/bin/tests/fuzz_safetensors)
  set(_fuzz_sources
      ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_header.cpp
      ${PROJECT_SOURCE_DIR}/ckpt/crc32c.cpp
      ${PROJECT_SOURCE_DIR}/ckpt/dtype.cpp
      ${PROJECT_SOURCE_DIR}/ckpt/format_error.cpp
      ${PROJECT_SOURCE_DIR}/ckpt/safetensors_header.cpp
      ${PROJECT_SOURCE_DIR}/ckpt/safetensors_reader.cpp
      ${PROJECT_SOURCE_DIR}/base/digest.cpp)
  file(GLOB _fuzz_headers ${PROJECT_SOURCE_DIR}/ckpt/*.h ${PROJECT_SOURCE_DIR}/base/*.h)
  add_custom_command(OUTPUT ${_fuzz_bin}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/bin/tests
    COMMAND ${RF_CLANGXX} -std=c++20 -O1 -g -fno-omit-frame-pointer
            -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
            -I${PROJECT_SOURCE_DIR} ${_fuzz_sources} -o ${_fuzz_bin}
    DEPENDS ${_fuzz_sources} ${_fuzz_headers}
    COMMENT "Building the safetensors fuzzer with ${RF_CLANGXX} (libFuzzer)"
    VERBATIM)
  add_custom_target(fuzz_safetensors ALL DEPENDS ${_fuzz_bin})
  rf_integration_test(NAME ckpt_fuzz_safetensors LAYER ckpt TIMEOUT 120
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/run_fuzz.sh ${_fuzz_bin} $<TARGET_FILE:st_write_sample>
            ${CMAKE_CURRENT_SOURCE_DIR}/fuzz.dict 15)
else()
  message(STATUS "ringfence: clang++ not found, the safetensors fuzz target is not built")
endif()
