# `cmake --install build --prefix P`: the CPU libraries (static), their headers under
# P/include/ringfence, the launcher P/bin/ringfence, and the CMake package
# P/lib/cmake/ringfence (ringfenceConfig.cmake, namespaced targets ringfence::<layer>).
# docs/your-model.md says which headers are the API; the others are installed because the
# API's headers include them. The CUDA halves are not installed (a GPU program builds in
# the tree).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Each exported target requires C++20 of whoever links it (its headers use std::span and
# other C++20): a consumer's CMakeLists needs no CMAKE_CXX_STANDARD of its own.
set(RINGFENCE_EXPORTED rf_flags rf_base rf_kernels_cpu rf_core rf_data rf_comm rf_elastic rf_ckpt rf_ckpt_state rf_ddp)
foreach(t ${RINGFENCE_EXPORTED})
  string(REGEX REPLACE "^rf_" "" name ${t})
  set_target_properties(${t} PROPERTIES EXPORT_NAME ${name})
  add_library(ringfence::${name} ALIAS ${t})  # the same names inside the build tree
  get_target_property(type ${t} TYPE)
  if(type STREQUAL "INTERFACE_LIBRARY")
    target_compile_features(${t} INTERFACE cxx_std_20)
  else()
    target_compile_features(${t} PUBLIC cxx_std_20)
  endif()
endforeach()

install(TARGETS ${RINGFENCE_EXPORTED} EXPORT ringfenceTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ringfence)
install(TARGETS ringfence RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
foreach(dir base kernels core comm elastic ckpt ddp)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ringfence/${dir}
          FILES_MATCHING PATTERN "*.h")
endforeach()

# Optional dependencies the libraries were built with, for the package's find_dependency.
get_property(RINGFENCE_USES_OPENMP GLOBAL PROPERTY RINGFENCE_USES_OPENMP)
get_property(RINGFENCE_USES_CURL GLOBAL PROPERTY RINGFENCE_USES_CURL)
set(RINGFENCE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ringfence)
install(EXPORT ringfenceTargets NAMESPACE ringfence:: DESTINATION ${RINGFENCE_CMAKE_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/ringfenceConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/ringfenceConfig.cmake
                              INSTALL_DESTINATION ${RINGFENCE_CMAKE_DIR}
                              PATH_VARS CMAKE_INSTALL_BINDIR)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/ringfenceConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/ringfenceConfig.cmake ${PROJECT_BINARY_DIR}/ringfenceConfigVersion.cmake
        DESTINATION ${RINGFENCE_CMAKE_DIR})
