// Memory that never stalls behind a signal wait (see signal_safe_memory.h).
#include "base/signal_safe_memory.h"

#include <cstdlib>
#include <string>

namespace uccl {

bool SignalSafeMemory::quiet_locked() {
  if (ops_.waits_outstanding && ops_.waits_outstanding()) return false;
  std::vector<void*> dev, pinned;
  dev.swap(deferred_device_);
  pinned.swap(deferred_pinned_);
  for (void* p : dev) ops_.free_sync(p);
  for (void* p : pinned) ops_.free_pinned_sync(p);
  return true;
}

Result<void*> SignalSafeMemory::alloc(int ordinal, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (quiet_locked() || !ops_.alloc_unsync) return ops_.alloc_sync(ordinal, bytes);
  Result<void*> p = ops_.alloc_unsync(ordinal, bytes);
  if (p.ok()) {
    unsync_device_.insert(p.value());
    ++stats_.unsync_allocs;
  }
  return p;
}

void SignalSafeMemory::free(void* ptr) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (unsync_device_.erase(ptr)) {
    ops_.free_unsync(ptr);
    return;
  }
  if (quiet_locked()) {
    ops_.free_sync(ptr);
    return;
  }
  deferred_device_.push_back(ptr);
  ++stats_.deferred_frees;
}

Result<void*> SignalSafeMemory::alloc_pinned(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (quiet_locked()) return ops_.alloc_pinned_sync(bytes);
  // Pageable memory: what alloc_pinned promises (ordinary host memory) minus the page lock.
  void* p = std::aligned_alloc(4096, ((bytes ? bytes : 1) + 4095) & ~size_t(4095));
  if (!p) return Status(Code::kSystemError, "host memory of " + std::to_string(bytes) + " bytes: out of memory");
  pageable_.insert(p);
  ++stats_.pageable_allocs;
  return p;
}

void SignalSafeMemory::free_pinned(void* ptr) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (pageable_.erase(ptr)) {
    std::free(ptr);
    return;
  }
  if (quiet_locked()) {
    ops_.free_pinned_sync(ptr);
    return;
  }
  deferred_pinned_.push_back(ptr);
  ++stats_.deferred_frees;
}

Status SignalSafeMemory::enqueue_wait(const std::function<Status()>& enqueue) {
  std::lock_guard<std::mutex> lock(mu_);
  return enqueue();
}

SignalSafeMemory::Stats SignalSafeMemory::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace uccl
