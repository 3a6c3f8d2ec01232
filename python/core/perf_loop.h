// _core.perf_loop, the C++ timing loop behind uccl-perf (see perf_loop.cc).
#pragma once

#include <pybind11/pybind11.h>

namespace uccl {

void register_perf_loop(pybind11::module_& m);

}  // namespace uccl
