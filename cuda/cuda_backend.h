// The CUDA device backend (libuccl_cuda.so; see cuda/cuda_module.h for why it is a module): the
// class, whose methods live in three files by concern, so each can be read alone:
//   cuda_backend.cc   identity, pointer ownership, streams, copies, kernels, events
//   cuda_memory.cc    device, pinned and registered host memory (behind SignalSafeMemory)
//   cuda_signals.cc   stream waits on host-raised signals and what keeps them safe
// (cuda_driver.cc resolves the driver entry points and probes the runtime.)
//
// Streams are cudaStream_t (owned ones are created non-blocking, so they never serialise with
// the legacy default stream), events are cudaEvent_t without timing, created lazily on the
// device of the stream they are first recorded on (CUDA requires event and stream to share a
// device). Every call first makes the right device current on the calling thread: the core
// calls from its progress thread, which has no current device of its own.
//
// owns(): a pointer can only be CUDA device memory once some primary context exists in the
// process. Until one does (a host-only user on a GPU machine) owns() answers false without a
// single runtime call that would create a context and take GPU memory. After that the driver
// is asked (cuPointerGetAttributes through the runtime's driver entry point: no context is
// made current). Managed and host-registered memory count as host memory.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/device.h"
#include "base/signal_safe_memory.h"
#include "cuda/cuda_backend_internal.h"
#include "cuda/cuda_stream.h"

namespace uccl {
namespace cuda {

class CudaBackend final : public DeviceBackend {
 public:
  const char* name() const override { return "cuda"; }
  MemoryKind kind() const override { return MemoryKind::kCuda; }

  // --- identity and pointers (cuda_backend.cc) ---
  bool available(std::string* why) const override;
  int device_count() const override { return available(nullptr) ? probe_.count : 0; }
  bool owns(const void* ptr, int* ordinal) const override;
  // Until some primary context exists in this process no pointer can be CUDA memory (a
  // host-only program on a GPU machine): cheap driver queries, and one atomic load after.
  bool may_own_memory() const override { return available(nullptr) && any_context(); }
  // The device whose primary context is active (a process that has not touched a GPU yet has
  // none: then "" and the rail falls back to the local rank). Lower case, as sysfs names it.
  std::string current_pci_bus_id() const override;

  // --- memory (cuda_memory.cc) ---
  // Memory goes through SignalSafeMemory (base/signal_safe_memory.h): cudaMalloc, cudaFree,
  // cudaHostAlloc and cudaFreeHost synchronize the device, so they run only while no stream
  // waits on one of our signals; meanwhile device memory comes from cudaMallocAsync and
  // pinned memory from a reserve topped up before each wait is queued (or pageable past it).
  Result<void*> alloc(int ordinal, size_t bytes) override;
  void free(void* ptr) override { mem_.free(ptr); }
  Result<void*> alloc_pinned(size_t bytes) override;
  void free_pinned(void* ptr) override { mem_.free_pinned(ptr); }
  bool pinned_scarce() override { return available(nullptr) && waits_outstanding(); }
  // cudaHostRegister / cudaHostUnregister may synchronize like cudaHostAlloc / cudaFreeHost:
  // registered only while no stream waits on a signal (else the range stays pageable), and
  // unregistered (then unmapped by `then`) at the next quiet moment.
  bool register_host(void* ptr, size_t bytes) override;
  void unregister_host(void* ptr, std::function<void()> then) override;
  SignalSafeMemory& memory() { return mem_; }

  // --- streams, copies, kernels, events (cuda_backend.cc) ---
  Result<std::unique_ptr<DeviceStream>> create_stream(int ordinal) override;
  Result<std::unique_ptr<DeviceStream>> wrap_stream(int ordinal, uintptr_t handle) override;
  Status copy_async(void* dst, const void* src, size_t bytes, CopyDir dir, DeviceStream* s) override;
  // The copy kernel where the device reaches both sides (its memory, a peer's IPC mapping, pinned
  // host memory at its mapped address); pageable host memory, and overlapping ranges, by the
  // engines as copy_async (device.h says what that risks while a user's stream waits on uccl).
  Status copy_by_kernel_async(void* dst, const void* src, size_t bytes, CopyDir dir, DeviceStream* s) override;
  Status reduce_async(void* dst, const void* a, const void* b, size_t count, DataType dt, RedOp op,
                      DeviceStream* s) override;
  // Pinned or registered host memory (registered with cudaHostRegisterMapped, allocated by
  // cudaHostAlloc: mapped under unified addressing) at its device address; pageable: nullptr.
  // Whether reduces read it is the loader's reduces_from_host() (UCCL_CUDA_REDUCE_FROM_HOST).
  const void* kernel_view_of_host(const void* host, int ordinal) const override;
  size_t staging_chunk_bytes() const override { return 8u << 20; }  // see device.h
  Status scale_async(void* dst, const void* src, size_t count, DataType dt, double factor,
                     DeviceStream* s) override;
  Status divide_async(void* dst, const void* src, size_t count, DataType dt, int n, DeviceStream* s) override;
  Result<std::unique_ptr<DeviceEvent>> create_event() override;
  Status record(DeviceEvent* e, DeviceStream* s) override;
  Result<bool> query(DeviceEvent* e) override;
  Status stream_wait(DeviceStream* s, DeviceEvent* e) override;
  Result<bool> capturing(DeviceStream* s) override;
  Status synchronize(DeviceStream* s) override;

  // --- signals (cuda_signals.cc) ---
  Result<std::shared_ptr<DeviceSignal>> create_signal(int ordinal) override;
  Status stream_wait_signal(DeviceStream* s, const std::shared_ptr<DeviceSignal>& sig, StreamWaitMode how) override;
  bool signal_waits_safe(std::string* why) const override;

 private:
  // cuda_backend.cc
  Status use_device(int ordinal, DeviceGuard* g) const;
  static const void* device_view(const void* p, bool* host = nullptr);
  static Status launched(const char* what, int err);
  bool context_active(int i) const;
  int preferred_device() const;
  bool any_context() const;
  void mark_context() { context_seen_.store(true); }

  // cuda_memory.cc: the memory calls behind mem_, the device-synchronizing ones and
  // cudaMallocAsync's.
  Result<void*> malloc_sync(int ordinal, size_t bytes);
  void free_sync(void* ptr);
  Result<void*> host_alloc_sync(size_t bytes);
  void host_free_sync(void* ptr);
  cudaStream_t alloc_stream(int ordinal);
  Result<void*> malloc_unsync(int ordinal, size_t bytes);
  void free_unsync(void* ptr);

  // cuda_signals.cc
  void preload_kernels(int ordinal);
  bool waits_outstanding();
  void reap_signals();

  struct WaitingSignal {
    std::shared_ptr<CudaSignal> sig;
    cudaEvent_t done;
    int ordinal;
  };
  std::mutex signals_mu_;
  std::vector<WaitingSignal> waiting_signals_;
  std::mutex alloc_streams_mu_;
  cudaStream_t alloc_streams_[64] = {};
  std::map<void*, int> alloc_ordinal_of_;  // cudaMallocAsync'ed pointers (under mem_'s lock)
  SignalSafeMemory mem_{SignalSafeMemory::Ops{
      [this](int o, size_t n) { return malloc_sync(o, n); }, [this](void* p) { free_sync(p); },
      [this](size_t n) { return host_alloc_sync(n); }, [this](void* p) { host_free_sync(p); },
      [this](int o, size_t n) { return malloc_unsync(o, n); }, [this](void* p) { free_unsync(p); },
      [this] { return waits_outstanding(); }}};

  std::once_flag preloaded_[64];
  mutable std::once_flag probe_once_;
  mutable RuntimeProbe probe_;
  mutable std::atomic<bool> context_seen_{false};
};

CudaBackend& the_backend();

}  // namespace cuda
}  // namespace uccl
