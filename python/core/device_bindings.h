// _core's device functions: the registered device backends (build_info, uccl.info), where an
// address lives, the simulated device's memory and streams (uccl.sim), and the staged bounce
// buffer total (tests). See device_bindings.cc.
#pragma once

#include <pybind11/pybind11.h>

namespace uccl {

void register_device(pybind11::module_& m);
// [{name, kind, available, why_not, devices}] for build_info().
pybind11::list device_backend_list();

}  // namespace uccl
