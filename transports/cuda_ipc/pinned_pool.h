// Page-locked host buffers for the cuda_ipc endpoint's stages, pooled.
//
// Why: a stage is where bytes wait between the device and the host (a device buffer the peer
// cannot map, a host destination of a peer's device buffer, a payload that came early). A
// cudaMemcpyAsync to or from pageable memory is synchronous for the calling thread, which is
// the engine's progress thread, and cudaHostAlloc costs milliseconds: so stages are pinned
// blocks (sizes rounded up to powers of two, at least 64 KiB) kept for reuse, up to
// `keep_bytes` of free blocks per endpoint. When pinned memory cannot be had, a stage falls
// back to ordinary memory (correct; the copy then blocks). Not thread safe (one endpoint).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "base/device.h"

namespace uccl {
namespace cuda_ipc {

class PinnedPool {
 public:
  PinnedPool(DeviceBackend* backend, size_t keep_bytes) : b_(backend), keep_(keep_bytes) {}
  ~PinnedPool() {
    for (auto& f : free_) b_->free_pinned(f.second);
  }
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  // A block of at least n bytes (its size in *size), or nullptr when none can be pinned.
  uint8_t* take(size_t n, size_t* size) {
    auto it = free_.lower_bound(n);
    if (it != free_.end()) {
      *size = it->first;
      uint8_t* p = it->second;
      free_bytes_ -= it->first;
      free_.erase(it);
      return p;
    }
    size_t s = 64 << 10;
    while (s < n) s <<= 1;
    auto r = b_->alloc_pinned(s);
    if (!r.ok()) return nullptr;
    *size = s;
    return static_cast<uint8_t*>(r.value());
  }
  void give(uint8_t* p, size_t size) {
    if (free_bytes_ + size > keep_) {
      b_->free_pinned(p);
      return;
    }
    free_.emplace(size, p);
    free_bytes_ += size;
  }
  size_t free_bytes() const { return free_bytes_; }

 private:
  DeviceBackend* b_;
  size_t keep_;
  std::multimap<size_t, uint8_t*> free_;
  size_t free_bytes_ = 0;
};

// One stage: a pooled pinned block, or ordinary memory when none could be pinned. Returns its
// block to the pool when destroyed (only after the device work using it has completed).
class Stage {
 public:
  Stage() = default;
  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;
  ~Stage() { release(); }
  void get(PinnedPool* pool, size_t n) {
    release();
    pool_ = pool;
    p_ = pool->take(n, &size_);
    if (!p_) {
      fallback_.resize(n);
      p_ = fallback_.data();
      pool_ = nullptr;
    }
  }
  uint8_t* data() const { return p_; }
  bool empty() const { return p_ == nullptr; }
  void release() {
    if (pool_ && p_) pool_->give(p_, size_);
    pool_ = nullptr;
    p_ = nullptr;
    fallback_.clear();
    fallback_.shrink_to_fit();
  }

 private:
  PinnedPool* pool_ = nullptr;
  uint8_t* p_ = nullptr;
  size_t size_ = 0;
  std::vector<uint8_t> fallback_;
};

}  // namespace cuda_ipc
}  // namespace uccl
