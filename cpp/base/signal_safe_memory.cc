// Memory that never stalls behind a signal wait (see signal_safe_memory.h).
#include "base/signal_safe_memory.h"

#include <cstdlib>
#include <string>

namespace uccl {

bool SignalSafeMemory::quiet_locked() {
  if (ops_.waits_outstanding && ops_.waits_outstanding()) return false;
  std::vector<void*> dev, pinned;
  std::vector<std::function<void()>> calls;
  dev.swap(deferred_device_);
  pinned.swap(deferred_pinned_);
  calls.swap(deferred_calls_);
  for (void* p : dev) ops_.free_sync(p);
  for (void* p : pinned) ops_.free_pinned_sync(p);
  for (auto& fn : calls) fn();
  return true;
}

SignalSafeMemory::~SignalSafeMemory() {
  for (auto& [size, p] : reserve_free_) ops_.free_pinned_sync(p);
}

void SignalSafeMemory::run_when_quiet(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  if (quiet_locked()) {
    fn();
    return;
  }
  deferred_calls_.push_back(std::move(fn));
  ++stats_.deferred_frees;
}

bool SignalSafeMemory::run_if_quiet(const std::function<void()>& fn) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!quiet_locked()) return false;
  fn();
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
  if (bytes > largest_pinned_request_) largest_pinned_request_ = bytes;
  if (quiet_locked()) return ops_.alloc_pinned_sync(bytes);
  auto it = reserve_free_.lower_bound(bytes);
  if (it != reserve_free_.end()) {
    void* p = it->second;
    reserve_free_bytes_ -= it->first;
    reserve_free_.erase(it);
    ++stats_.reserve_allocs;
    return p;
  }
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
  auto owned = reserve_owned_.find(ptr);
  if (owned != reserve_owned_.end()) {  // back into the reserve
    reserve_free_.emplace(owned->second, ptr);
    reserve_free_bytes_ += owned->second;
    return;
  }
  if (quiet_locked()) {
    ops_.free_pinned_sync(ptr);
    return;
  }
  deferred_pinned_.push_back(ptr);
  ++stats_.deferred_frees;
}

void SignalSafeMemory::top_up() {
  std::lock_guard<std::mutex> lock(mu_);
  top_up_locked();
}

void SignalSafeMemory::top_up_locked() {
  size_t block = largest_pinned_request_ < kMinBlock ? kMinBlock : largest_pinned_request_;
  if (block > kMaxBlock) block = kMaxBlock;
  block = (block + 4095) & ~size_t(4095);
  if (reserve_owned_bytes_ >= reserve_target_ && reserve_free_.lower_bound(block) != reserve_free_.end()) return;
  if (!quiet_locked()) return;
  // Blocks smaller than today's requests cannot serve them: let them go while it is quiet.
  for (auto it = reserve_free_.begin(); it != reserve_free_.end() && it->first < block;) {
    ops_.free_pinned_sync(it->second);
    reserve_owned_.erase(it->second);
    reserve_owned_bytes_ -= it->first;
    reserve_free_bytes_ -= it->first;
    it = reserve_free_.erase(it);
  }
  while (reserve_owned_bytes_ + block <= reserve_target_) {
    Result<void*> p = ops_.alloc_pinned_sync(block);
    if (!p.ok()) return;  // pinned memory is short: requests will get pageable memory
    reserve_owned_.emplace(p.value(), block);
    reserve_free_.emplace(block, p.value());
    reserve_free_bytes_ += block;
    reserve_owned_bytes_ += block;
  }
}

Status SignalSafeMemory::enqueue_wait(const std::function<Status()>& enqueue) {
  std::lock_guard<std::mutex> lock(mu_);
  top_up_locked();  // the reserve exists before the wait does: it serves requests made meanwhile
  return enqueue();
}

SignalSafeMemory::Stats SignalSafeMemory::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  s.reserve_bytes = reserve_free_bytes_;
  return s;
}

}  // namespace uccl
