#include "python/core/py_store.h"

#include <pybind11/stl.h>

namespace py = pybind11;

namespace uccl {

namespace {
// A Python exception from the store becomes a Status: a TimeoutError (builtin or subclass)
// stays a timeout, so callers can retry a short lookup; anything else is the store failing.
// By type only, never by the message's text (uccl/store.py says how torch's stores get there).
Status from_python_error(py::error_already_set& e, const std::string& what) {
  const bool timeout = e.matches(PyExc_TimeoutError);
  return Status(timeout ? Code::kTimeout : Code::kRemoteError, what + ": " + e.what());
}
}  // namespace

PyStore::~PyStore() {
  py::gil_scoped_acquire gil;
  obj_ = py::object();
}

Status PyStore::set(const std::string& key, const std::string& value) {
  py::gil_scoped_acquire gil;
  try {
    obj_.attr("set")(key, py::bytes(value));
    return Status::Ok();
  } catch (py::error_already_set& e) {
    return from_python_error(e, "store.set(" + key + ")");
  }
}

Result<std::string> PyStore::get(const std::string& key, double timeout_s) {
  py::gil_scoped_acquire gil;
  try {
    py::object v = obj_.attr("get")(key, timeout_s);
    return std::string(py::bytes(v));
  } catch (py::error_already_set& e) {
    return from_python_error(e, "store.get(" + key + ")");
  }
}

Status PyStore::wait(const std::vector<std::string>& keys, double timeout_s) {
  py::gil_scoped_acquire gil;
  try {
    obj_.attr("wait")(keys, timeout_s);
    return Status::Ok();
  } catch (py::error_already_set& e) {
    return from_python_error(e, "store.wait");
  }
}

Result<int64_t> PyStore::add(const std::string& key, int64_t delta) {
  py::gil_scoped_acquire gil;
  try {
    return obj_.attr("add")(key, delta).cast<int64_t>();
  } catch (py::error_already_set& e) {
    return from_python_error(e, "store.add(" + key + ")");
  }
}

}  // namespace uccl
