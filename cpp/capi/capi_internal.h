// Shared by the two halves of the C API (include/uccl/uccl.h): the handle structs, the error
// plumbing (code mapping, per-thread last error) and the exception guard. Nothing here is
// public; the C header is the only contract.
#pragma once

#include <memory>
#include <string>

#include "uccl/tcp_store.h"
#include "uccl/communicator.h"
#include "uccl/uccl.h"

struct uccl_comm {
  std::shared_ptr<uccl::Communicator> c;
  std::unique_ptr<uccl::TcpStoreServer> server;  // the store this process serves for it, if any
};

struct uccl_request {
  uccl::WorkPtr work;
};

namespace uccl::capi {

// Records s as this thread's last error and returns its code (UCCL_SUCCESS for Ok).
uccl_result_t record(const Status& s);
// Records an invalid argument of `fn` and returns UCCL_ERR_INVALID_ARGUMENT.
uccl_result_t invalid(const char* fn, const std::string& what);
// The communicator options a uccl_config_t gives (NULL: defaults); reads only the fields the
// caller's struct has (config->size).
CommOptions options_of(const uccl_config_t* cfg);

// Runs f, turning any escaping exception into UCCL_ERR_INTERNAL (no exception crosses C).
template <class F>
uccl_result_t guard(const char* fn, F&& f) noexcept {
  try {
    return f();
  } catch (const std::exception& e) {
    return record(Internal(std::string(fn) + ": " + e.what()));
  } catch (...) {
    return record(Internal(std::string(fn) + ": unknown exception"));
  }
}

}  // namespace uccl::capi
