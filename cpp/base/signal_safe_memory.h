// Device and pinned memory that never stalls behind a DeviceSignal wait.
//
// Why: on CUDA, cudaMalloc, cudaFree, cudaHostAlloc and cudaFreeHost synchronize the whole
// device: they wait for every stream of it, a user's stream included. Work::wait_stream (the
// torch backend's work.wait(), Work.wait(stream=)) queues on a user's stream a wait for a
// DeviceSignal that only uccl's progress thread raises, when the operation completes. If that
// thread then allocated or freed memory the synchronizing way (a staged bounce buffer, an
// IPC stage, the executor's device scratch), it would wait for the user's stream, which waits
// for the thread: a deadlock. It is what hung the first H200 runs (test_work_wait_makes_a_stream_wait,
// the torch backend on CUDA tensors, benchmarks/results/gpu_h200_20261127b).
//
// The rule this class enforces, for the backends (cuda/, the simulated device, which models
// CUDA's implicit synchronization so that CI sees the same deadlocks): a synchronizing call is
// made only while no signal wait is outstanding, and under a lock that every new signal wait
// takes too (so none can be queued while the call waits). Otherwise a request is served
// without one: device memory from a stream-ordered allocator (cudaMallocAsync), host memory
// pageable instead of pinned (copies still work, slower), frees deferred until the device is
// quiet again. Thread safe.
//
// Pinned memory for the time a wait is outstanding: a reserve of pinned blocks, filled while the
// device is quiet by enqueue_wait() just before it queues a wait (on the caller's thread, so the
// reserve exists before the first wait does), hands out blocks to pinned
// requests made meanwhile and takes them back when freed. Without it the torch backend's
// bounce buffers, made by the progress thread while the caller's stream already waits, would
// all be pageable for the life of the connection (a device-to-host copy into pageable memory
// blocks the progress thread). Requests larger than the reserve's blocks get pageable memory.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "uccl/status.h"

namespace uccl {

class SignalSafeMemory {
 public:
  struct Ops {
    // The device-synchronizing calls (cudaMalloc / cudaFree / cudaHostAlloc / cudaFreeHost).
    std::function<Result<void*>(int ordinal, size_t bytes)> alloc_sync;
    std::function<void(void* ptr)> free_sync;
    std::function<Result<void*>(size_t bytes)> alloc_pinned_sync;
    std::function<void(void* ptr)> free_pinned_sync;
    // Device memory without synchronizing the device, usable on any stream when it returns
    // (cudaMallocAsync on an internal stream, then that stream synchronized), and its free.
    std::function<Result<void*>(int ordinal, size_t bytes)> alloc_unsync;
    std::function<void(void* ptr)> free_unsync;
    // Whether a queued signal wait has not passed yet (called under the lock).
    std::function<bool()> waits_outstanding;
  };
  static constexpr size_t kReserveBytes = 32u << 20;  // pinned blocks kept for busy times
  static constexpr size_t kMinBlock = 512u << 10;      // the staged transport's default chunk
  static constexpr size_t kMaxBlock = 8u << 20;
  explicit SignalSafeMemory(Ops ops, size_t reserve_bytes = kReserveBytes)
      : ops_(std::move(ops)), reserve_target_(reserve_bytes) {}
  // Frees the reserve's free blocks (the owners free what they hold first). The process-wide
  // backends are never destroyed (at exit the device runtime may be gone already); test
  // instances are.
  ~SignalSafeMemory();

  Result<void*> alloc(int ordinal, size_t bytes);
  void free(void* ptr);
  Result<void*> alloc_pinned(size_t bytes);
  void free_pinned(void* ptr);
  // Queues a signal wait (the backend's `enqueue`) under the lock of the synchronizing calls,
  // after topping up the pinned reserve. May synchronize: the caller's thread only.
  Status enqueue_wait(const std::function<Status()>& enqueue);
  // Runs fn (another device-synchronizing call: cudaIpcCloseMemHandle) now if no wait is
  // outstanding, else at the next call that finds the device quiet. Runs under the lock: fn must
  // not call into this object.
  void run_when_quiet(std::function<void()> fn);
  // Runs fn now if no wait is outstanding and returns true; else false, and fn never runs
  // (a call worth making only now: cudaHostRegister of a mapping about to be used). Same lock.
  bool run_if_quiet(const std::function<void()>& fn);
  // Fills the pinned reserve when the device is quiet (blocks of the largest pinned request
  // seen so far, between kMinBlock and kMaxBlock). enqueue_wait() does it; tests call it alone.
  void top_up();

  // Counters for tests: requests served without a synchronizing call.
  struct Stats {
    size_t unsync_allocs = 0, pageable_allocs = 0;
    size_t deferred_frees = 0;  // frees (and run_when_quiet calls) put off until the device was quiet
    size_t reserve_allocs = 0;  // pinned requests served from the reserve while a wait was outstanding
    size_t reserve_bytes = 0;   // pinned bytes in the reserve now (free)
  };
  Stats stats() const;

 private:
  // Under mu_: true when no wait is outstanding; then also runs the deferred frees.
  bool quiet_locked();
  void top_up_locked();

  Ops ops_;
  mutable std::mutex mu_;
  std::set<void*> unsync_device_;  // from alloc_unsync
  std::set<void*> pageable_;       // pageable stand-ins for pinned memory
  std::map<void*, size_t> reserve_owned_;     // every block the reserve allocated, by address
  std::multimap<size_t, void*> reserve_free_;  // those free now, by size
  size_t reserve_target_, reserve_owned_bytes_ = 0, reserve_free_bytes_ = 0, largest_pinned_request_ = 0;
  std::vector<void*> deferred_device_, deferred_pinned_;
  std::vector<std::function<void()>> deferred_calls_;
  Stats stats_;
};

}  // namespace uccl
