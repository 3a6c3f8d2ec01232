# Packaging of libuccl and the public headers (include/uccl, with the C API uccl.h) so that
# other builds find them: find_package(uccl) -> target uccl::uccl, and pkg-config uccl.
#
# Two layouts, one set of relocatable files (paths relative to the file's own location):
#   cmake --install:  <prefix>/<libdir>/libuccl.so, <prefix>/include/uccl/*.h,
#                     <prefix>/<libdir>/cmake/uccl/ucclConfig.cmake, <prefix>/<libdir>/pkgconfig/uccl.pc
#   Python wheel:     uccl/libuccl.so, uccl/include/uccl/*.h, uccl/lib/cmake/uccl, uccl/lib/pkgconfig
#                     (python -m uccl.info --cmakedir / --pkgconfigdir print the last two).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

if(SKBUILD)
  set(UCCL_PKG_LIBDIR uccl)
  set(UCCL_PKG_INCDIR uccl/include)
  set(UCCL_PKG_CMAKEDIR uccl/lib/cmake/uccl)
  set(UCCL_PKG_PCDIR uccl/lib/pkgconfig)
else()
  set(UCCL_PKG_LIBDIR ${CMAKE_INSTALL_LIBDIR})
  set(UCCL_PKG_INCDIR ${CMAKE_INSTALL_INCLUDEDIR})
  set(UCCL_PKG_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/uccl)
  set(UCCL_PKG_PCDIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
  install(TARGETS uccl LIBRARY DESTINATION ${UCCL_PKG_LIBDIR})
endif()

# Relative paths from the package files to the library and the headers.
file(RELATIVE_PATH UCCL_CMAKE_TO_LIB /p/${UCCL_PKG_CMAKEDIR} /p/${UCCL_PKG_LIBDIR})
file(RELATIVE_PATH UCCL_CMAKE_TO_INC /p/${UCCL_PKG_CMAKEDIR} /p/${UCCL_PKG_INCDIR})
file(RELATIVE_PATH UCCL_PC_TO_LIB /p/${UCCL_PKG_PCDIR} /p/${UCCL_PKG_LIBDIR})
file(RELATIVE_PATH UCCL_PC_TO_INC /p/${UCCL_PKG_PCDIR} /p/${UCCL_PKG_INCDIR})

install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/include/uccl DESTINATION ${UCCL_PKG_INCDIR} FILES_MATCHING PATTERN "*.h")
configure_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/ucclConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/pkg/ucclConfig.cmake @ONLY)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/pkg/ucclConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
configure_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/uccl.pc.in ${CMAKE_CURRENT_BINARY_DIR}/pkg/uccl.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/pkg/ucclConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/pkg/ucclConfigVersion.cmake
  DESTINATION ${UCCL_PKG_CMAKEDIR})
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/pkg/uccl.pc DESTINATION ${UCCL_PKG_PCDIR})
