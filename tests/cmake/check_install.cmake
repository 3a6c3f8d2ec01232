# ctest's install_and_find_package: `cmake --install` the build into a fresh prefix, then build
# and run tests/cmake/consumer against it with find_package(uccl) (nothing from the source tree).
# Arguments: -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK_DIR=...
file(REMOVE_RECURSE "${WORK_DIR}")
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()
run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix")
if(NOT EXISTS "${WORK_DIR}/prefix/include/uccl/communicator.h")
  message(FATAL_ERROR "the public headers were not installed")
endif()
file(GLOB_RECURSE _internal "${WORK_DIR}/prefix/include/*/base/*" "${WORK_DIR}/prefix/include/core/*")
if(_internal)
  message(FATAL_ERROR "internal headers were installed: ${_internal}")
endif()
run(${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/cmake/consumer" -B "${WORK_DIR}/build"
    "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix" -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
run("${WORK_DIR}/build/consumer")
