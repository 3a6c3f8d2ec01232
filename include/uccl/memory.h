// Where a buffer lives, as uccl sees it: host memory, or the memory of one of uccl's device
// backends (CUDA where the cuda backend is available, the simulated device of the tests).
//
// Public (include/uccl). Why: a framework that holds device tensors asks before it hands one to
// uccl in place (the torch backend does: in place, ordered on the tensor's current stream, when
// uccl owns the memory; staged through host copies otherwise).
#pragma once

#include <string>

namespace uccl {

struct MemoryInfo {
  bool device = false;  // false: host memory (or memory no device backend of uccl claims)
  std::string backend;  // "cuda", "sim", ... ("" for host memory)
  int ordinal = -1;     // the device of that backend
};
MemoryInfo memory_info(const void* ptr);

}  // namespace uccl
