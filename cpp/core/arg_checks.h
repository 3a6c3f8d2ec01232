// The argument checks every operation makes before anything runs, in one place: the
// communicator's calls, its estimates and uccl::Estimator refuse the same input with the same
// words (kInvalidArgument naming the call and what was wrong).
#pragma once

#include <string>

#include "uccl/status.h"
#include "uccl/types.h"

namespace uccl {

inline Status check_dtype(const char* what, DataType dt) {
  if (!dtype_valid(static_cast<int>(dt)))
    return InvalidArgument(std::string(what) + ": invalid dtype " + std::to_string(static_cast<int>(dt)));
  return Status::Ok();
}

// A valid reduction op for dt (bitwise ones for integer types only).
inline Status check_op(const char* what, DataType dt, RedOp op) {
  if (!redop_valid(static_cast<int>(op)))
    return InvalidArgument(std::string(what) + ": invalid reduction op " + std::to_string(static_cast<int>(op)));
  if (redop_is_bitwise(op) && !dtype_is_integer(dt))
    return InvalidArgument(std::string(what) + ": " + redop_name(op) + " needs an integer dtype, got " + dtype_name(dt));
  return Status::Ok();
}

inline Status check_root(const char* what, int root, int size) {
  if (root < 0 || root >= size)
    return InvalidArgument(std::string(what) + ": root " + std::to_string(root) + " out of range for " +
                           std::to_string(size) + " ranks");
  return Status::Ok();
}

}  // namespace uccl
