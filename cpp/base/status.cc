#include "uccl/status.h"

#include <cstring>

namespace uccl {

const char* code_name(Code c) {
  switch (c) {
    case Code::kOk: return "ok";
    case Code::kInvalidArgument: return "invalid argument";
    case Code::kNotSupported: return "not supported";
    case Code::kTimeout: return "timeout";
    case Code::kRemoteError: return "remote error";
    case Code::kMismatch: return "mismatched call";
    case Code::kAborted: return "aborted";
    case Code::kSystemError: return "system error";
    case Code::kInternal: return "internal error";
    case Code::kUnauthenticated: return "unauthenticated";
  }
  return "unknown";
}

Status SystemError(const std::string& what, int err) {
  return Status(Code::kSystemError, what + ": " + std::strerror(err));
}

}  // namespace uccl
