# NCCL for the NCCL backend (comm/nccl/, linked into rf_comm_cuda). Looked for, in order:
#   1. RINGFENCE_NCCL_ROOT (cache variable, or the environment variable of that name):
#      include/nccl.h and lib/ or lib64/ under it;
#   2. the CUDA toolkit's include and lib/lib64 directories;
#   3. Python's nvidia.nccl package (PyTorch's pip wheel nvidia-nccl-cu13), which ships
#      include/ and lib/ with only libnccl.so.2 (no libnccl.so link), so the versioned
#      name is searched too.
# RINGFENCE_NCCL=OFF skips the search (a build with CUDA and without the NCCL backend).
# Sets RINGFENCE_HAVE_NCCL and, when found, the imported target ringfence_nccl.
# Prints "-- ringfence: NCCL <version> (<header>, <library>)" or "... not found".
set(RINGFENCE_NCCL_ROOT "$ENV{RINGFENCE_NCCL_ROOT}" CACHE PATH "Where NCCL is (include/, lib/)")
set(RINGFENCE_NCCL AUTO CACHE STRING "The NCCL backend: AUTO (when NCCL is found) or OFF")
set(RINGFENCE_HAVE_NCCL OFF)

set(_rf_nccl_hints "")
if(RINGFENCE_NCCL_ROOT)
  list(APPEND _rf_nccl_hints "${RINGFENCE_NCCL_ROOT}")
endif()
list(APPEND _rf_nccl_hints "${CUDAToolkit_LIBRARY_ROOT}" "${CUDAToolkit_TARGET_DIR}")
get_filename_component(_rf_cuda_inc_parent "${CUDAToolkit_INCLUDE_DIRS}" DIRECTORY)
list(APPEND _rf_nccl_hints "${_rf_cuda_inc_parent}")
# The interpreter CMake found, and the python3 on PATH (the one PyTorch was installed
# into may be either).
find_package(Python3 QUIET COMPONENTS Interpreter)
find_program(_rf_path_python3 python3)
foreach(_rf_py ${Python3_EXECUTABLE} ${_rf_path_python3})
  execute_process(
    COMMAND ${_rf_py} -c "import nvidia.nccl,os;print(os.path.dirname(nvidia.nccl.__file__))"
    OUTPUT_VARIABLE _rf_nccl_py OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rf_nccl_py_rc)
  if(_rf_nccl_py_rc EQUAL 0 AND _rf_nccl_py)
    list(APPEND _rf_nccl_hints "${_rf_nccl_py}")
  endif()
endforeach()

if(RINGFENCE_NCCL STREQUAL "OFF")
  message(STATUS "ringfence: NCCL not found (RINGFENCE_NCCL=OFF); rf_comm_cuda builds without the NCCL backend")
  return()
endif()
find_path(RINGFENCE_NCCL_INCLUDE_DIR nccl.h HINTS ${_rf_nccl_hints} PATH_SUFFIXES include NO_CACHE)
# NAMES_PER_DIR: a hinted directory's libnccl.so.2 wins over a libnccl.so elsewhere.
find_library(RINGFENCE_NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${_rf_nccl_hints}
             PATH_SUFFIXES lib lib64 NO_CACHE)

if(RINGFENCE_NCCL_INCLUDE_DIR AND RINGFENCE_NCCL_LIBRARY)
  get_filename_component(RINGFENCE_NCCL_INCLUDE_DIR "${RINGFENCE_NCCL_INCLUDE_DIR}" ABSOLUTE)
  file(STRINGS "${RINGFENCE_NCCL_INCLUDE_DIR}/nccl.h" _rf_nccl_ver REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) ")
  string(REGEX REPLACE ".*NCCL_MAJOR ([0-9]+).*NCCL_MINOR ([0-9]+).*NCCL_PATCH ([0-9]+).*" "\\1.\\2.\\3"
         RINGFENCE_NCCL_VERSION "${_rf_nccl_ver}")
  set(RINGFENCE_HAVE_NCCL ON)
  if(NOT TARGET ringfence_nccl)
    add_library(ringfence_nccl UNKNOWN IMPORTED)
    set_target_properties(ringfence_nccl PROPERTIES IMPORTED_LOCATION "${RINGFENCE_NCCL_LIBRARY}"
                          INTERFACE_INCLUDE_DIRECTORIES "${RINGFENCE_NCCL_INCLUDE_DIR}")
  endif()
  message(STATUS "ringfence: NCCL ${RINGFENCE_NCCL_VERSION} (${RINGFENCE_NCCL_INCLUDE_DIR}/nccl.h, ${RINGFENCE_NCCL_LIBRARY})")
else()
  message(STATUS "ringfence: NCCL not found (set RINGFENCE_NCCL_ROOT; looked in: ${_rf_nccl_hints}); "
                 "rf_comm_cuda builds without the NCCL backend")
endif()
