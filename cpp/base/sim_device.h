// The simulated device: a DeviceBackend that runs on any machine, so every device path of uccl
// (executor, staged transport, Python arrays) is tested in CI without an accelerator.
//
// Why it is faithful: the address handed out is a PROT_NONE reservation with no memory behind
// it, so host code that dereferences a "device pointer" by mistake crashes in the tests exactly
// as it would on a GPU; the memory is a second, private mapping (huge pages where the kernel
// gives them, as a GPU's allocations are) that only the stream workers reach (host_view).
// Each stream is a worker thread executing its kernels in order (the kernels are the host ones
// of reduce.h on the worker, so results are bitwise those of the host), events are markers in
// that queue, stream_wait makes the worker wait. Copies go as on a GPU: copy_async through the
// device's copy engine, one queue shared by every stream of the device (a copy waits there, in
// order, for the work queued before it on its own stream, so a copy behind a stream that waits
// holds every later copy of the device: the hazard device.h describes, which CI sees here; a GPU
// has an engine or more per direction, one queue for all is the strictest model and serializes
// the two directions; UCCL_SIM_COPY_ENGINES=2 gives one per direction), copy_by_kernel_async on the stream's own worker like any kernel. A kernel may read host memory
// for its last operand (kernel_view_of_host(), a GPU's zero-copy loads of mapped pinned memory;
// UCCL_SIM_REDUCE_FROM_HOST=0 turns it off, as cuda has it); those bytes are charged at the
// copy speed. As on a GPU, a kernel reaches only pinned host memory: alloc_pinned's (not the
// pageable memory SignalSafeMemory hands out past its reserve) and ranges register_host took,
// which it does only while no stream waits on a signal; a copy by kernel with another host side
// goes through the engine. Copies touching device memory are throttled to a settable bandwidth and latency
// (UCCL_SIM_COPY_GBPS, UCCL_SIM_COPY_LATENCY_US for the process-wide "sim" backend; per-instance
// options for a test that wants two vendors with different copy speeds in one process). Like
// CUDA's cudaMalloc / cudaFree / cudaHostAlloc / cudaFreeHost, alloc, free, alloc_pinned and
// free_pinned wait for every stream of the device to run dry, behind the same SignalSafeMemory
// policy as the cuda backend: code that would deadlock a GPU behind a signal wait deadlocks
// here too.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <atomic>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "base/config.h"
#include "base/device.h"
#include "base/signal_safe_memory.h"

namespace uccl {

extern const DoubleSetting kSimCopyGbps;       // UCCL_SIM_COPY_GBPS (0 = unthrottled)
extern const DoubleSetting kSimCopyLatencyUs;  // UCCL_SIM_COPY_LATENCY_US
extern const IntSetting kSimDevices;           // UCCL_SIM_DEVICES
extern const BoolSetting kSimReduceFromHost;   // UCCL_SIM_REDUCE_FROM_HOST
extern const IntSetting kSimCopyEngines;       // UCCL_SIM_COPY_ENGINES

class SimStream;  // sim_stream.h

struct SimOptions {
  std::string name = "sim";
  int devices = 2;
  double copy_gbps = 0;        // GB/s (1e9 bytes/s) of copies touching device memory; 0: memcpy speed
  double copy_latency_us = 0;  // added to every such copy
  // Kernels read host memory (zero-copy); false models a device that copies first, as the cuda
  // backend does today (tests of what the copy-then-reduce path allocates).
  bool reduces_from_host = true;
  size_t staging_chunk_bytes = 0;  // DeviceBackend::staging_chunk_bytes (0: no preference)
  // Copy engines per device: 1, one queue for every copy (the strictest model: the two
  // directions serialize); 2, one for copies to the device and one for the rest, as a GPU's
  // engines per direction let host->device and device->host copies overlap.
  int copy_engines = 1;
};

class SimBackend final : public DeviceBackend {
 public:
  explicit SimBackend(SimOptions opt);
  ~SimBackend() override;
  // Settings may change between calls (tests): throttling reads these on every copy.
  void set_copy_speed(double gbps, double latency_us);
  double copy_gbps() const;
  double copy_latency_us() const;
  // Bytes of device memory allocated now (tests check that nothing leaks).
  size_t allocated_bytes() const;

  const char* name() const override { return name_.c_str(); }
  MemoryKind kind() const override { return MemoryKind::kSim; }
  bool available(std::string* why) const override;
  int device_count() const override { return devices_; }
  bool owns(const void* ptr, int* ordinal) const override;
  bool may_own_memory() const override { return live_allocs_.load(std::memory_order_relaxed) > 0; }
  Result<void*> alloc(int ordinal, size_t bytes) override;
  void free(void* ptr) override;
  Result<void*> alloc_pinned(size_t bytes) override;
  void free_pinned(void* ptr) override;
  bool pinned_scarce() override { return waits_outstanding_.load() > 0; }
  Result<std::unique_ptr<DeviceStream>> create_stream(int ordinal) override;
  Result<std::unique_ptr<DeviceStream>> wrap_stream(int ordinal, uintptr_t handle) override;
  Status copy_async(void* dst, const void* src, size_t bytes, CopyDir dir, DeviceStream* s) override;
  Status copy_by_kernel_async(void* dst, const void* src, size_t bytes, CopyDir dir, DeviceStream* s) override;
  Status reduce_async(void* dst, const void* a, const void* b, size_t count, DataType dt, RedOp op,
                      DeviceStream* s) override;
  const void* kernel_view_of_host(const void* host, int) const override;
  bool reduces_from_host() const override { return reduces_from_host_; }
  // Host ranges count as pinned while registered (the rule of cuda's: only while no stream waits
  // on a signal, else false and the range stays pageable); the memory is not touched.
  bool register_host(void* ptr, size_t bytes) override;
  void unregister_host(void* ptr, std::function<void()> then) override;
  size_t staging_chunk_bytes() const override { return staging_chunk_bytes_; }
  Status scale_async(void* dst, const void* src, size_t count, DataType dt, double factor,
                     DeviceStream* s) override;
  Status divide_async(void* dst, const void* src, size_t count, DataType dt, int n, DeviceStream* s) override;
  Result<std::unique_ptr<DeviceEvent>> create_event() override;
  Status record(DeviceEvent* e, DeviceStream* s) override;
  Result<bool> query(DeviceEvent* e) override;
  Status stream_wait(DeviceStream* s, DeviceEvent* e) override;
  Result<std::shared_ptr<DeviceSignal>> create_signal(int ordinal) override;
  // kSignal and kKernel alike: the stream's worker waits (what a GPU's queue or a polling kernel does).
  Status stream_wait_signal(DeviceStream* s, const std::shared_ptr<DeviceSignal>& sig, StreamWaitMode how) override;
  Result<bool> capturing(DeviceStream* s) override;
  // Tests: makes `s` report a graph capture in progress (CUDA's cudaStreamBeginCapture), or not.
  Status set_capturing(DeviceStream* s, bool on);
  Status synchronize(DeviceStream* s) override;

  // The writable host view of [ptr, ptr + bytes) of this backend's device memory, or nullptr
  // when that range is not inside one allocation. Only the workers (and this class) use it.
  char* host_view(const void* ptr, size_t bytes) const;
  // Requests served without synchronizing the device (a signal wait was outstanding).
  SignalSafeMemory::Stats memory_stats() const { return mem_.stats(); }

 private:
  struct Alloc {
    size_t bytes;      // requested
    size_t mapped;     // page multiple
    char* rw;          // the worker's mapping
    int ordinal;
  };
  Result<void*> raw_alloc(int ordinal, size_t bytes);
  void raw_free(void* ptr);
  // Models CUDA's implicit synchronization of cudaMalloc / cudaFree / cudaHostAlloc /
  // cudaFreeHost: returns once every stream of this backend has run dry.
  void device_sync();
  // Resolves a pointer that is either device memory of this backend or host memory.
  Status resolve(const void* ptr, size_t bytes, bool want_device, char** out) const;
  // Both sides of a copy resolved and checked against its direction; the bus's speed for it.
  Status resolve_copy(void* dst, const void* src, size_t bytes, CopyDir dir, char** d, char** sr, double* gbps,
                      double* lat) const;
  // copy_async (by_engine: through the device's engine) and copy_by_kernel_async (on the stream).
  Status queue_copy(void* dst, const void* src, size_t bytes, CopyDir dir, DeviceStream* s, bool by_engine);
  // Device `ordinal`'s copy engine: one queue for the copies of every stream, in the order they
  // were queued (made at first use). A copy runs on its stream's worker once the engine serves
  // its turn: one copy at a time per device, as on a single engine, without a thread of its own
  // (handing each copy to one and back cost two wake-ups and a thread more on the CPUs the ranks
  // share; benchmarks/RESULTS.md).
  struct EngineTurns {
    std::mutex mu;
    std::condition_variable cv;
    uint64_t next = 0;     // the turn the next copy takes (under engine_order_mu_)
    uint64_t serving = 0;  // the turn whose copy may run (under mu)
  };
  std::shared_ptr<EngineTurns> engine(int ordinal, CopyDir dir);  // the engine serving dir (copy_engines)
  // Checks the stream, resolves each operand (at most 3) and queues fn(operands) on the stream.
  Status enqueue_kernel(DeviceStream* s, size_t bytes, std::initializer_list<const void*> operands,
                        std::function<void(char* const*)> fn);

  std::string name_;
  int devices_;
  mutable std::mutex mu_;
  std::map<uintptr_t, Alloc> allocs_;  // by device address
  size_t allocated_ = 0;
  std::atomic<size_t> live_allocs_{0};
  double gbps_, latency_us_;
  bool reduces_from_host_;
  int copy_engines_;
  size_t staging_chunk_bytes_;
  std::atomic<int> waits_outstanding_{0};  // signal waits queued and not passed yet
  std::map<std::pair<int, int>, std::shared_ptr<EngineTurns>> engines_;  // by ordinal and engine, under mu_
  std::mutex engine_order_mu_;  // a copy takes its turn and queues its task under it
  std::map<uintptr_t, size_t> pinned_;  // host ranges a kernel reaches (alloc_pinned, register_host), under mu_
  SignalSafeMemory mem_;                   // last: its calls use the members above
};

// The process-wide simulated device (registered as "sim", settings from UCCL_SIM_*).
SimBackend* sim_backend();

}  // namespace uccl
