// Status -> typed Python exception (uccl.errors), carrying the code and the peer rank.
#pragma once

#include <pybind11/pybind11.h>

#include "uccl/status.h"

namespace uccl {

[[noreturn]] void throw_status(const Status& s);

}  // namespace uccl
