// PyStore: a uccl::Store over any Python object with the store methods.
//
// The object must offer set(key, bytes), get(key, timeout_s) -> bytes, wait(keys, timeout_s)
// and add(key, delta) -> int, and get/wait must raise TimeoutError (or a subclass) when the keys
// did not appear in time: the exception's type decides between kTimeout and kRemoteError.
// uccl/store.py adapts torch.distributed stores (whose wait takes a timedelta and whose timeouts
// are untyped) to that shape. Calls take the GIL: they may come from the progress
// thread while the caller's thread waits with the GIL released.
#pragma once

#include <pybind11/pybind11.h>

#include "uccl/store.h"

namespace uccl {

class PyStore : public Store {
 public:
  explicit PyStore(pybind11::object obj) : obj_(std::move(obj)) {}
  ~PyStore() override;
  Status set(const std::string& key, const std::string& value) override;
  Result<std::string> get(const std::string& key, double timeout_s) override;
  Status wait(const std::vector<std::string>& keys, double timeout_s) override;
  Result<int64_t> add(const std::string& key, int64_t delta) override;

 private:
  pybind11::object obj_;
};

}  // namespace uccl
