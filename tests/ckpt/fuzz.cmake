# The libFuzzer target for the safetensors reader (cmake/RingfenceFuzz.cmake builds it with
# clang++ and runs it for 15 s in ctest). Seeds: a real snapshot written by st_write_sample
# and three small hand-made files; any crash, sanitizer report, leak, timeout or exception
# other than FormatError fails the test.
include(${PROJECT_SOURCE_DIR}/cmake/RingfenceFuzz.cmake)
rf_fuzz_target(NAME fuzz_safetensors LAYER ckpt SECONDS 15
  SEEDS ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_seeds
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_header.cpp
          ${PROJECT_SOURCE_DIR}/ckpt/crc32c.cpp
          ${PROJECT_SOURCE_DIR}/ckpt/dtype.cpp
          ${PROJECT_SOURCE_DIR}/ckpt/format_error.cpp
          ${PROJECT_SOURCE_DIR}/ckpt/safetensors_header.cpp
          ${PROJECT_SOURCE_DIR}/ckpt/safetensors_reader.cpp
          ${PROJECT_SOURCE_DIR}/base/digest.cpp
  LIBS ${XXHASH_LINK_LIBRARIES})  # the digest is XXH3-128 (libxxhash)
