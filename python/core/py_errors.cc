#include "python/core/py_errors.h"

namespace py = pybind11;

namespace uccl {

namespace {
const char* class_for(Code c) {
  switch (c) {
    case Code::kInvalidArgument: return "InvalidArgument";
    case Code::kNotSupported: return "NotSupported";
    case Code::kTimeout: return "TimeoutError";
    case Code::kRemoteError: return "RemoteError";
    case Code::kMismatch: return "MismatchError";
    case Code::kAborted: return "AbortedError";
    case Code::kUnauthenticated: return "AuthenticationError";
    default: return "UcclError";
  }
}
}  // namespace

void throw_status(const Status& s) {
  py::gil_scoped_acquire gil;
  py::object errors = py::module_::import("uccl.errors");
  py::object cls = errors.attr(class_for(s.code()));
  py::object exc = cls(s.message(), static_cast<int>(s.code()), s.peer() >= 0 ? py::cast(s.peer()) : py::none());
  PyErr_SetObject(cls.ptr(), exc.ptr());
  throw py::error_already_set();
}

}  // namespace uccl
