// The device-backend interface: how the core reaches accelerator memory of any vendor.
//
// Why an interface in base (floor 1): the executor (core), the staged transport wrapper
// (transports) and the Python bindings all need "where does this pointer live, and how do I
// copy / reduce there", while the backends themselves (cuda/, the simulated device in
// cpp/base/sim_device.*) must not be known to any of them by name. A backend registers itself
// once (static initializer, like a transport) and the rest of uccl walks the registry.
//
// The contract (docs/DEVICE_INTERFACE.md says the same, with the threading rules):
//  * Nothing here blocks except synchronize() (tools, tests, teardown; never the executor; the
//    staged transport's one fallback waits on a stream of its own: staged_endpoint.h hop_for).
//    Work is *enqueued* on a DeviceStream and completes in order on that stream; completion
//    is observed by recording a DeviceEvent and query()ing it. The executor is a state machine
//    driven by progress(): it only ever queries.
//  * Device memory may be unreachable from host code (the simulated device hands out PROT_NONE
//    addresses): only copy_async and the kernels below touch it. Pinned host memory from
//    alloc_pinned() is ordinary host memory (readable, writable, registrable with a NIC).
//  * Kernels compute exactly what the host kernels of cpp/base/reduce.h compute, element for
//    element, bit for bit (float16/bfloat16 in float32 rounded once, NaN propagation as on the
//    host), so a result never depends on which device reduced it.
//  * Errors are Status values (code kSystemError / kInvalidArgument / kInternal, with a
//    message naming the backend and the call); a device fault found later (an asynchronous
//    kernel error) is reported by the next query() on an event recorded after it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/futex_bell.h"
#include "uccl/status.h"
#include "uccl/memory.h"
#include "uccl/types.h"

namespace uccl {

// Where a buffer lives. Values are stable (Python and logs print them): append only.
enum class MemoryKind : uint8_t {
  kHost = 0,   // ordinary (pageable or pinned) host memory
  kCuda = 1,   // CUDA device memory (the cuda/ backend)
  kSim = 2,    // the simulated device (tests without an accelerator)
  kOther = 3,  // another vendor's accelerator with a native backend
};
const char* memory_kind_name(MemoryKind k);

enum class CopyDir : uint8_t { kHostToDevice = 0, kDeviceToHost = 1, kDeviceToDevice = 2, kHostToHost = 3 };

// A queue of device work executed in order. Created by its backend; either owned (destroyed
// with it) or a wrapper around a stream handle the user gave (a cudaStream_t as an integer):
// destroying the wrapper leaves the user's stream alone.
class DeviceStream {
 public:
  virtual ~DeviceStream() = default;
  virtual int ordinal() const = 0;
  virtual bool external() const = 0;  // wraps a user's handle
  virtual uintptr_t handle() const = 0;  // the native handle (cudaStream_t; a simulated stream's address)
  // Sleeping until the stream moves (core/idle_wait.h): a stream whose work runs on this host's
  // CPUs (the simulated device's worker) has a doorbell (base/futex_bell.h) it rings after each
  // task, so a driver that waited past its spin sleeps until a copy is done instead of polling
  // every 100 us. nullptr where the device rings nothing (cuda: events are polled, as NCCL's
  // proxy does).
  virtual FutexBell* completion_bell() { return nullptr; }
};

// A marker recorded on a stream; complete when everything enqueued before it on that stream
// has completed. Re-recording resets it (like cudaEventRecord).
class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
};

// How Work::wait_stream holds a user's stream back until an operation completes
// (UCCL_STREAM_WAIT; stream_wait_policy() below). Values are stable (logs print them).
enum class StreamWaitMode : uint8_t {
  kHost = 0,    // the host waits for the operation, then the stream has nothing to wait for (Gloo's way)
  kSignal = 1,  // the device runtime's own wait on a word the host raises (cuda: cuStreamWaitValue32,
                // a semaphore acquire in the stream's hardware queue)
  kKernel = 2,  // a one-thread kernel queued on the stream polls that word (cuda: the way NCCL's
                // kernels wait for the host: a running kernel, not a blocked queue)
};
const char* stream_wait_mode_name(StreamWaitMode m);

// A flag the host raises once, that device streams can wait on without a host thread blocking
// (Work::wait_stream: a user's stream waits for an operation the way NCCL's work.wait() makes
// the current stream wait). The backend keeps whatever the device still reads alive, so the
// owner may drop its reference at any time after raise().
class DeviceSignal {
 public:
  virtual ~DeviceSignal() = default;
  virtual void raise() = 0;  // thread safe; idempotent
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;

  // --- identity and availability -----------------------------------------------------------
  virtual const char* name() const = 0;  // "cuda", "sim"; unique in the registry
  virtual MemoryKind kind() const = 0;
  // Usable in this process (cuda: runtime loaded and >= 1 device); else *why says why not.
  virtual bool available(std::string* why) const = 0;
  virtual int device_count() const = 0;

  // --- memory --------------------------------------------------------------------------------
  // Whether `ptr` is device memory of this backend, including memory it did not allocate
  // itself (a torch / CuPy CUDA pointer: the cuda backend asks the driver). On true, *ordinal
  // is the device. Must be cheap and thread safe; never blocks on device work.
  virtual bool owns(const void* ptr, int* ordinal) const = 0;
  // A cheap hint (one atomic load): false when owns() would answer false for every pointer,
  // e.g. the simulated device with no live allocation. The core skips the lookup of host-only
  // operations on it and offers staged connections only when some backend may own memory.
  // Backends that cannot know (cuda: torch allocates behind our back) keep the default.
  virtual bool may_own_memory() const { return true; }
  // The PCI address ("0000:17:00.0") of the device this process computes on, "" when it uses
  // none yet or the backend cannot tell. Picks the rank's rail NIC (topology/rails.h).
  virtual std::string current_pci_bus_id() const { return ""; }
  // Device memory of `bytes` (> 0) on device `ordinal`.
  virtual Result<void*> alloc(int ordinal, size_t bytes) = 0;
  virtual void free(void* ptr) = 0;  // nullptr is a no-op; only pointers from alloc()
  // Page-locked host memory for bounce buffers (the sim backend: plain aligned memory).
  virtual Result<void*> alloc_pinned(size_t bytes) = 0;
  virtual void free_pinned(void* ptr) = 0;
  // Whether pinned memory is scarce now: while a stream waits on a signal of uccl's, a backend
  // whose pinned allocation would synchronize the device (cuda's cudaHostAlloc) serves
  // alloc_pinned from a bounded reserve, and past it with pageable memory (signal_safe_memory.h).
  // Pools of pinned buffers (the staged transport's slots) then stop growing early, so that
  // every connection keeps some. The sim backend models it; the default: never.
  virtual bool pinned_scarce() { return false; }
  // Page-locks host memory allocated elsewhere (a shared mapping both ranks of a pair see) so
  // that copies to and from it run at pinned speed (cuda: cudaHostRegister). Best effort: false
  // when it was not registered (copies still work, as from pageable memory). A registered range
  // is given back with unregister_host(), which runs `then` (the unmap) once the range is no
  // longer registered, perhaps later on another uccl thread (cuda: when no stream waits on a
  // signal, as signal_safe_memory.h requires). The sim backend: nothing to lock.
  virtual bool register_host(void* /*ptr*/, size_t /*bytes*/) { return false; }
  virtual void unregister_host(void* /*ptr*/, std::function<void()> then) { then(); }

  // --- streams -------------------------------------------------------------------------------
  virtual Result<std::unique_ptr<DeviceStream>> create_stream(int ordinal) = 0;
  // Wraps a user's native stream handle (0 = the device's default stream). Not owned.
  virtual Result<std::unique_ptr<DeviceStream>> wrap_stream(int ordinal, uintptr_t handle) = 0;

  // --- asynchronous work on a stream (enqueue and return; never wait) ------------------------
  // memcpy in the given direction by the device's copy engines (cudaMemcpyAsync: DMA); host
  // pointers may be pageable or pinned. What a user's copy is; uccl's own copies go through
  // device_copy_async() (below), which picks this or copy_by_kernel_async().
  virtual Status copy_async(void* dst, const void* src, size_t bytes, CopyDir dir, DeviceStream* s) = 0;
  // The same copy done by the device's cores (a kernel), not its copy engines. Why both: the copy
  // engines' queues are shared by every stream of the device, and a copy a user queued behind a
  // wait on uccl (work.wait(), then tensor.cpu()) holds the engine queue it lands in until that
  // wait passes; a copy uccl queues later on any stream waits behind it, and the operation the
  // user waits for never completes (mscclpp #503 saw the same with its proxy's cudaMemcpyAsync;
  // the H200 hang of 2026-11-28 fits it). A running kernel holds no engine queue: NCCL moves all
  // its data with kernels. Host memory a kernel cannot reach (pageable, on CUDA) still goes by
  // the engines. Default: copy_async (a backend without kernels of its own).
  virtual Status copy_by_kernel_async(void* dst, const void* src, size_t bytes, CopyDir dir, DeviceStream* s) {
    return copy_async(dst, src, bytes, dir, s);
  }
  // The kernels of cpp/base/reduce.h on device memory of this backend (dst may alias a or b).
  // `b` may also be host memory as kernel_view_of_host() gives it (zero-copy, below).
  virtual Status reduce_async(void* dst, const void* a, const void* b, size_t count, DataType dt,
                              RedOp op, DeviceStream* s) = 0;
  // Where this backend's kernels can read the host memory at `host` directly from device
  // `ordinal` - pinned memory mapped into the device (alloc_pinned, or a range register_host
  // registered) - the address they read it at; nullptr where they cannot (pageable memory).
  // cuda: the mapped device address; sim: `host` itself inside its pinned or registered ranges
  // (its kernels read host memory at its copy speed, as a GPU's loads of mapped pinned memory go
  // at the bus's), nullptr elsewhere, as on a GPU.
  virtual const void* kernel_view_of_host(const void* /*host*/, int /*ordinal*/) const { return nullptr; }
  // Whether the staged transport lets the reduce kernel read a landed chunk straight out of its
  // slot where kernel_view_of_host() reaches it (zero-copy: one pass over the device's data)
  // instead of copying it to a device temporary first. sim: yes (UCCL_SIM_REDUCE_FROM_HOST=0:
  // no); cuda: UCCL_CUDA_REDUCE_FROM_HOST (off until a GPU run measures it against
  // copy-then-reduce: tests/gpu/bench_gpu.py's staged-zc mode).
  virtual bool reduces_from_host() const { return false; }
  // The staging chunk this backend's copies want (transports/staged: the pipeline's unit when
  // UCCL_STAGED_CHUNK_BYTES is auto), 0 for no preference (the host default, 512 KiB). cuda: a
  // copy's fixed cost (its call, an event, the progress thread's turn) must stay small beside
  // its bytes at PCIe speed: 8 MiB (H200, two ranks on one GPU, 64 MiB all_reduce busbw through
  // registered shared slots: 3.9 GB/s with 512 KiB chunks, 11.7 with 2 MiB, 22.2 with 8 MiB of
  // the 27.6 the shared PCIe link allows; benchmarks/RESULTS.md).
  virtual size_t staging_chunk_bytes() const { return 0; }
  virtual Status scale_async(void* dst, const void* src, size_t count, DataType dt, double factor,
                             DeviceStream* s) = 0;
  virtual Status divide_async(void* dst, const void* src, size_t count, DataType dt, int n,
                              DeviceStream* s) = 0;

  // --- events --------------------------------------------------------------------------------
  virtual Result<std::unique_ptr<DeviceEvent>> create_event() = 0;
  virtual Status record(DeviceEvent* e, DeviceStream* s) = 0;
  // Non-blocking: true when complete, false while pending, a Status on a device error. An
  // event never recorded counts as complete.
  virtual Result<bool> query(DeviceEvent* e) = 0;
  // Work enqueued on `s` after this call starts only once `e` completed (no host wait).
  virtual Status stream_wait(DeviceStream* s, DeviceEvent* e) = 0;
  // A fresh signal for streams of device `ordinal`, and a wait on it: work enqueued on `s` after
  // stream_wait_signal() starts only once the signal was raised. `how` (kSignal or kKernel, see
  // StreamWaitMode) picks the device's way of waiting; sim: its stream's worker waits either way.
  // Backends without it: kNotSupported.
  virtual Result<std::shared_ptr<DeviceSignal>> create_signal(int ordinal);
  virtual Status stream_wait_signal(DeviceStream* s, const std::shared_ptr<DeviceSignal>& sig, StreamWaitMode how);
  // Whether a stream of this backend may wait on a signal that only uccl's progress thread raises
  // without risking a deadlock in the device runtime itself; false with *why when not. CUDA: no.
  // (1) The device work that completes the operation (copies, reduce kernels on uccl's streams)
  // is queued after the wait, and CUDA cannot see that the waiting stream depends on it: NVIDIA
  // warns that the scheduler may then serialize them in the wrong order (cuStreamWaitValue32's
  // documentation), and the H200 run of 2026-11-28 hung so with eager module loading, over IPC
  // and staged alike (a broadcast into a freshly allocated tensor, then tensor.cpu(),
  // benchmarks/RESULTS.md). The likely way (copy_by_kernel_async above): the user's copy behind
  // the wait held the copy engines' queue in front of uccl's copies; uccl's copies now run as
  // kernels under stream waits (device_copy_async), which the next GPU run is to confirm before
  // this answers yes under eager loading.
  // (2) With lazy module loading (CUDA_MODULE_LOADING=LAZY, PyTorch's default) any thread's first
  // launch of a kernel loads its module under the context's lock and waits for the whole device
  // to drain, which a stream waiting on our signal never does (torchcomms #2334). A safe wait
  // needs every device step of the operation queued before it (NCCL's kernels, which wait inside
  // a running kernel). Work::wait_stream asks stream_wait_policy() (below), which reads this.
  virtual bool signal_waits_safe(std::string* why) const { return true; }
  // Whether `s` is recording a graph (a CUDA graph capture): work queued there is recorded to
  // be replayed later, not run. uccl's operations run on its progress thread and cannot be
  // recorded, so the core refuses to order one on (or make wait) such a stream.
  virtual Result<bool> capturing(DeviceStream* s) { return false; }
  // Blocks until everything enqueued on `s` completed. Tests, tools and teardown only.
  virtual Status synchronize(DeviceStream* s) = 0;
};

// --- the registry ----------------------------------------------------------------------------
// Registers a backend that lives for the whole process (a static in its folder). Returns true;
// a duplicate name aborts (a bug).
bool register_device_backend(DeviceBackend* backend);
// Every registered backend, in registration order (available or not).
std::vector<DeviceBackend*> device_backends();
DeviceBackend* find_device_backend(const std::string& name);

// kNotSupported naming `what` when `s` is capturing a graph (DeviceBackend::capturing): the
// operation would be recorded into the user's graph half-done, or a replay would skip its wait.
Status refuse_capture(DeviceBackend* b, DeviceStream* s, const std::string& what);

// How Work::wait_stream makes a stream wait on `b` (UCCL_STREAM_WAIT: auto | signal | kernel |
// host): kSignal / kKernel = the stream waits for a signal the progress thread raises (the host
// returns at once, NCCL's work.wait()), kHost = the host waits for the operation, after which the
// stream has nothing left to wait for (Gloo's behaviour; never deadlocks). auto: kSignal where
// b->signal_waits_safe(), else kHost. *why says why the host waits (the setting, or the backend's
// reason).
StreamWaitMode stream_wait_policy(DeviceBackend* b, std::string* why);

// What one communicator's Work::wait_stream does: stream_wait_policy(), except that under auto
// only the communicator that owns the process's signal waits (`owns_signal_waits`: the first one
// made, while it lives; core/engine.h) waits by signal, and every other by the host.
// Why: a stream waiting on a signal holds the device's shared copy queues for whatever its user
// queues behind the wait (reading the result: tensor.cpu(), x.numpy(stream=)) until uccl raises
// the signal. Two communicators doing so, whose operations the ranks issue in different orders
// (threads: a pipeline's sends beside data-parallel all_reduces), wait on each other across
// ranks: rank 0's read behind A's wait holds the copy of B's input, rank 1's read behind B's wait
// holds A's input, and neither operation can start where it is held (tests/thread_soak.py found
// it on the simulated device, whose one copy-engine queue is the worst case of CUDA's shared
// hardware queues). NCCL leaves that to its users: operations on different communicators must be
// issued in the same order on every rank. With one communicator waiting by signal nothing can
// hold its operations but its own earlier ones, and host waits hold no queue at all. A forced
// UCCL_STREAM_WAIT=signal|kernel applies to every communicator, with NCCL's rule.
StreamWaitMode stream_wait_for(DeviceBackend* b, bool owns_signal_waits, std::string* why);

// How uccl's own copies of device memory run (the executor's local copies, the staged and IPC
// transports): by kernel (copy_by_kernel_async) where a user's stream may wait on uccl's signals
// (stream_wait_policy() is not kHost), else by the copy engines (copy_async: DMA, no cores
// taken). UCCL_DEVICE_COPIES=engine|kernel forces one (auto: as said).
bool copies_by_kernel(DeviceBackend* b);
Status device_copy_async(DeviceBackend* b, void* dst, const void* src, size_t bytes, CopyDir dir, DeviceStream* s);

// Where a pointer lives: asks each *available* registered backend's owns(); host when none
// claims it.
struct MemoryLoc {
  MemoryKind kind = MemoryKind::kHost;
  DeviceBackend* backend = nullptr;  // nullptr for host memory
  int ordinal = -1;
  bool is_device() const { return backend != nullptr; }
};
MemoryLoc locate_memory(const void* ptr);
// False when no available backend may own memory (host-only processes): one cheap check
// before any locate_memory() on the issue path.
bool any_device_memory();

// Host threads that device backends run their streams on now: the simulated device's stream
// workers, which copy and reduce with this machine's CPUs (0 for a device with engines of its
// own: CUDA copies are DMA). The waiting policy (core/idle_wait.h) counts them beside the ranks
// sharing the CPUs: a rank that spins while such a thread copies takes the CPU the copy needs
// (staged all_reduce of simulated-device buffers, 2 ranks on 2 cores, 64 MiB: 64-74 -> 38-53 ms
// yielding; benchmarks/RESULTS.md). Backends call add_device_host_threads(+1 / -1) when such a
// worker starts / ends.
int device_host_threads();
void add_device_host_threads(int delta);

// One line per registered backend for build_info / `python -m uccl.info`:
// {name, kind, available, why-not, device count, stream waits, staging chunk, uccl's copies}.
struct DeviceBackendInfo {
  std::string name;
  MemoryKind kind;
  bool available;
  std::string why_not;
  int devices;
  std::string stream_wait;  // "signal", "kernel", or "host (why)": stream_wait_policy(); "" when unavailable
  size_t staging_chunk = 0;  // DeviceBackend::staging_chunk_bytes(); 0: no preference, or unavailable
  std::string copies;        // "kernel" or "engine": copies_by_kernel(); "" when unavailable
};
std::vector<DeviceBackendInfo> device_backend_infos();

}  // namespace uccl
