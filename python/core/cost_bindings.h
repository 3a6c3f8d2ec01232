// _core's cost model (uccl.cost) and the dtype / reduction-op enums (uccl._buffers), see
// cost_bindings.cc.
#pragma once

#include <pybind11/pybind11.h>

namespace uccl {

void register_cost(pybind11::module_& m);
void register_enums(pybind11::module_& m);

}  // namespace uccl
