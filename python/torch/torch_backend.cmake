# The torch.distributed backend "uccl": Python extension uccl._torch (a c10d::Backend subclass).
#
# Included by the top-level CMakeLists inside the Python section, only when torch is importable
# and this folder exists. Uses: Python_EXECUTABLE, target `uccl` (the core library).

# Ask the torch that will load us where its headers/libraries are and which libstdc++ string ABI
# it was built with: a mismatch compiles fine and then fails at import with missing symbols.
# TORCH_DEVICE_BACKEND_AUTOLOAD=0: `import torch` would otherwise run uccl's own entry point,
# which fails while the source tree (the working directory here) shadows the installed uccl.
function(_uccl_torch_query out expr)
  execute_process(
    COMMAND ${CMAKE_COMMAND} -E env TORCH_DEVICE_BACKEND_AUTOLOAD=0 "${Python_EXECUTABLE}" -c "import torch, torch.utils.cpp_extension as e; print(${expr})"
    OUTPUT_VARIABLE _value OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "uccl: torch is importable but querying `${expr}` failed")
  endif()
  set(${out} "${_value}" PARENT_SCOPE)
endfunction()
# ';'-joined, i.e. CMake lists.
_uccl_torch_query(_uccl_torch_includes "';'.join(e.include_paths())")
_uccl_torch_query(_uccl_torch_libdirs "';'.join(e.library_paths())")
_uccl_torch_query(_uccl_torch_cxx11_abi "int(torch._C._GLIBCXX_USE_CXX11_ABI)")
_uccl_torch_query(_uccl_torch_version "torch.__version__")
if(NOT _uccl_torch_cxx11_abi EQUAL 1)
  # std::string crosses the uccl API (CommOptions, Status): the core would need the same ABI.
  message(FATAL_ERROR "uccl: torch was built with _GLIBCXX_USE_CXX11_ABI=0; the uccl core is "
    "built with the default (1) and passes std::string across its API. Use a cxx11-ABI torch "
    "or configure with -DUCCL_WITH_TORCH=OFF.")
endif()

set(_uccl_torch_libs)
foreach(_lib torch torch_cpu c10 torch_python)
  find_library(UCCL_TORCH_LIB_${_lib} NAMES ${_lib} PATHS ${_uccl_torch_libdirs} NO_DEFAULT_PATH)
  if(NOT UCCL_TORCH_LIB_${_lib})
    message(FATAL_ERROR "uccl: lib${_lib}.so not found in ${_uccl_torch_libdirs}")
  endif()
  list(APPEND _uccl_torch_libs ${UCCL_TORCH_LIB_${_lib}})
endforeach()

file(GLOB _uccl_torch_sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/python/torch/*.cc)
# NO_EXTRAS: no LTO (linking against torch with LTO costs minutes for nothing); the visibility
# setting it would add is set below.
pybind11_add_module(_torch MODULE NO_EXTRAS ${_uccl_torch_sources})
# torch's bundled pybind11 must win over the pip one: pybind11 shares classes between extension
# modules only when the "internals" version and platform ABI id match, and we need torch's
# classes (c10d.Store, c10d.Backend) as argument and base types. SYSTEM BEFORE puts these ahead
# of the pybind11 package's (also system) include directory and silences torch's warnings.
target_include_directories(_torch SYSTEM BEFORE PRIVATE ${_uccl_torch_includes})
target_compile_definitions(_torch PRIVATE _GLIBCXX_USE_CXX11_ABI=${_uccl_torch_cxx11_abi})
target_link_libraries(_torch PRIVATE uccl ${_uccl_torch_libs})
# $ORIGIN finds libuccl.so beside us; torch's libraries are already loaded by `import torch`
# (uccl._torch_backend imports torch first) and are matched by soname, so no torch path is baked in.
set_target_properties(_torch PROPERTIES
  INSTALL_RPATH "$ORIGIN"
  CXX_VISIBILITY_PRESET hidden
  VISIBILITY_INLINES_HIDDEN ON)
install(TARGETS _torch LIBRARY DESTINATION uccl)
message(STATUS "uccl: torch backend against torch ${_uccl_torch_version} (cxx11 abi ${_uccl_torch_cxx11_abi})")

# Entry-point shim outside the package (see its docstring): installed at the top of the wheel so
# that a shadowing source tree or a broken uccl cannot make `import torch` fail.
install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/python/torch/uccl_torch_autoload.py DESTINATION .)
