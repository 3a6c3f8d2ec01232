// The CUDA device backend (libuccl_cuda.so; see cuda/cuda_module.h for why it is a module).
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
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cctype>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/log.h"
#include "base/signal_safe_memory.h"
#include "cuda/cuda_backend_internal.h"
#include "cuda/cuda_kernels.h"
#include "cuda/cuda_stream.h"

namespace uccl {
namespace cuda {

Status cuda_error(const char* call, cudaError_t e) {
  const Code code = (e == cudaErrorInvalidValue || e == cudaErrorInvalidDevice ||
                     e == cudaErrorInvalidDevicePointer)
                        ? Code::kInvalidArgument
                        : Code::kSystemError;
  return Status(code, std::string("cuda: ") + call + " failed: " + cudaGetErrorName(e) + " (" +
                          cudaGetErrorString(e) + ")");
}

Driver& driver() {
  static Driver d;
  return d;
}

cudaError_t DeviceGuard::set(int ordinal) {
  Driver& d = driver();
  if (!saved_ && d.ctx_get_current && d.ctx_get_current(&prev_) == CUDA_SUCCESS) saved_ = true;
  return cudaSetDevice(ordinal);
}

DeviceGuard::~DeviceGuard() {
  Driver& d = driver();
  if (saved_ && d.ctx_set_current) d.ctx_set_current(prev_);
}

namespace {

template <class F>
void entry(const char* name, F* slot) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
      q == cudaDriverEntryPointSuccess)
    std::memcpy(slot, &p, sizeof p);
  cudaGetLastError();
}

class CudaBackend final : public DeviceBackend {
 public:
  const char* name() const override { return "cuda"; }
  MemoryKind kind() const override { return MemoryKind::kCuda; }

  bool available(std::string* why) const override {
    std::call_once(probe_once_, [this] { probe(); });
    if (!ok_ && why) *why = why_not_;
    return ok_;
  }
  int device_count() const override { return available(nullptr) ? count_ : 0; }

  bool owns(const void* ptr, int* ordinal) const override {
    if (!ptr || !available(nullptr)) return false;
    if (!any_context()) return false;
    Driver& d = driver();
    if (!d.pointer_get_attributes) return false;
    CUmemorytype type = static_cast<CUmemorytype>(0);
    int dev = -1;
    unsigned int managed = 0;
    CUpointer_attribute attrs[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                    CU_POINTER_ATTRIBUTE_IS_MANAGED};
    void* data[3] = {&type, &dev, &managed};
    if (d.pointer_get_attributes(3, attrs, data, reinterpret_cast<CUdeviceptr>(ptr)) != CUDA_SUCCESS)
      return false;
    if (type != CU_MEMORYTYPE_DEVICE || managed) return false;
    if (ordinal) *ordinal = dev;
    return true;
  }

  // Until some primary context exists in this process no pointer can be CUDA memory (a
  // host-only program on a GPU machine): cheap driver queries, and one atomic load after.
  bool may_own_memory() const override { return available(nullptr) && any_context(); }

  // The device whose primary context is active (a process that has not touched a GPU yet has
  // none: then "" and the rail falls back to the local rank). Lower case, as sysfs names it.
  std::string current_pci_bus_id() const override {
    if (!available(nullptr) || !any_context()) return "";
    Driver& d = driver();
    CUdevice dev = 0;
    char id[32] = {0};
    if (!d.device_get_pci_bus_id || d.device_get(&dev, preferred_device()) != CUDA_SUCCESS ||
        d.device_get_pci_bus_id(id, sizeof id, dev) != CUDA_SUCCESS)
      return "";
    std::string s(id);
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  }

  // Memory goes through SignalSafeMemory (base/signal_safe_memory.h): cudaMalloc, cudaFree,
  // cudaHostAlloc and cudaFreeHost synchronize the device, so they run only while no stream
  // waits on one of our signals; meanwhile device memory comes from cudaMallocAsync and
  // pinned memory from a reserve topped up before each wait is queued (or pageable past it).
  Result<void*> alloc(int ordinal, size_t bytes) override {  // malloc_(un)sync check the device
    if (bytes == 0) return InvalidArgument("cuda: alloc of 0 bytes");
    return mem_.alloc(ordinal, bytes);
  }
  void free(void* ptr) override { mem_.free(ptr); }
  Result<void*> alloc_pinned(size_t bytes) override {
    if (!available(nullptr)) return NotSupported("cuda: " + why_not_);
    return mem_.alloc_pinned(bytes);
  }
  void free_pinned(void* ptr) override { mem_.free_pinned(ptr); }
  bool pinned_scarce() override { return available(nullptr) && waits_outstanding(); }
  // cudaHostRegister / cudaHostUnregister may synchronize like cudaHostAlloc / cudaFreeHost:
  // registered only while no stream waits on a signal (else the range stays pageable), and
  // unregistered (then unmapped by `then`) at the next quiet moment.
  bool register_host(void* ptr, size_t bytes) override {
    if (!available(nullptr) || !ptr || bytes == 0) return false;
    bool ok = false;
    mem_.run_if_quiet([&] {
      // Mapped too: the reduce kernel may read a landed chunk where it lies (kernel_view_of_host).
      cudaError_t e = cudaHostRegister(ptr, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped);
      if (e != cudaSuccess) {  // pinned but unmapped is still worth having: copies at pinned speed
        cudaGetLastError();
        e = cudaHostRegister(ptr, bytes, cudaHostRegisterPortable);
      }
      if (e == cudaSuccess) {
        ok = true;
        return;
      }
      cudaGetLastError();  // copies stay pageable: slower, still right
      static std::once_flag said;
      std::call_once(said, [&] {
        UCCL_WARN("cuda: cudaHostRegister of %zu bytes of shared staging memory failed: %s (%s); copies through "
                  "it run at pageable speed", bytes, cudaGetErrorName(e), cudaGetErrorString(e));
      });
    });
    return ok;
  }
  void unregister_host(void* ptr, std::function<void()> then) override {
    mem_.run_when_quiet([ptr, then = std::move(then)] {
      if (cudaHostUnregister(ptr) != cudaSuccess) cudaGetLastError();
      then();
    });
  }
  SignalSafeMemory& memory() { return mem_; }

  Result<std::unique_ptr<DeviceStream>> create_stream(int ordinal) override {
    DeviceGuard g;
    UCCL_RETURN_IF_ERROR(use_device(ordinal, &g));
    cudaStream_t s = nullptr;
    if (cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) return cuda_error("cudaStreamCreate", e);
    mark_context();
    return std::unique_ptr<DeviceStream>(new CudaStream(ordinal, s, false));
  }
  Result<std::unique_ptr<DeviceStream>> wrap_stream(int ordinal, uintptr_t handle) override {
    DeviceGuard g;
    UCCL_RETURN_IF_ERROR(use_device(ordinal, &g));
    mark_context();
    return std::unique_ptr<DeviceStream>(new CudaStream(ordinal, reinterpret_cast<cudaStream_t>(handle), true));
  }

  Status copy_async(void* dst, const void* src, size_t bytes, CopyDir dir, DeviceStream* s) override {
    if (bytes == 0) return Status::Ok();
    DeviceGuard g;
    UCCL_RETURN_IF_ERROR(use_device(s->ordinal(), &g));
    // cudaMemcpyDefault: the driver knows every pointer's kind (unified addressing); a pageable
    // host side is staged by the driver, pinned memory goes by DMA.
    (void)dir;
    if (cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, raw(s))) return cuda_error("cudaMemcpyAsync", e);
    return Status::Ok();
  }
  // The copy kernel where the device reaches both sides (its memory, a peer's IPC mapping, pinned
  // host memory at its mapped address); pageable host memory, and overlapping ranges, by the
  // engines as copy_async (device.h says what that risks while a user's stream waits on uccl).
  Status copy_by_kernel_async(void* dst, const void* src, size_t bytes, CopyDir dir, DeviceStream* s) override {
    if (bytes == 0 || dst == src) return Status::Ok();
    DeviceGuard g;
    UCCL_RETURN_IF_ERROR(use_device(s->ordinal(), &g));
    void* d = const_cast<void*>(device_view(dst));
    const void* sr = device_view(src);
    const char* a = static_cast<const char*>(dst);
    const char* b = static_cast<const char*>(src);
    if (d && sr && !(a < b + bytes && b < a + bytes)) return launched("copy kernel", launch_copy(d, sr, bytes, raw(s)));
    static std::once_flag said;
    std::call_once(said, [&] {
      UCCL_INFO("cuda: a copy of %zu bytes from %s memory to %s memory goes by the copy engines (%s)", bytes,
                sr ? "reachable" : "pageable host", d ? "reachable" : "pageable host",
                d && sr ? "the ranges overlap" : "a kernel cannot reach pageable memory");
    });
    return copy_async(dst, src, bytes, dir, s);
  }
  Status reduce_async(void* dst, const void* a, const void* b, size_t count, DataType dt, RedOp op,
                      DeviceStream* s) override {
    DeviceGuard g;
    UCCL_RETURN_IF_ERROR(use_device(s->ordinal(), &g));
    return launched("reduce kernel", launch_reduce(dst, a, b, count, dt, op, raw(s)));
  }
  // Pinned or registered host memory (registered with cudaHostRegisterMapped, allocated by
  // cudaHostAlloc: mapped under unified addressing) at its device address; pageable: nullptr.
  // Whether reduces read it is the loader's reduces_from_host() (UCCL_CUDA_REDUCE_FROM_HOST).
  const void* kernel_view_of_host(const void* host, int ordinal) const override {
    if (!available(nullptr) || !host) return nullptr;
    DeviceGuard g;
    if (!use_device(ordinal, &g).ok()) return nullptr;
    bool is_host = false;
    const void* v = device_view(host, &is_host);
    return is_host ? v : nullptr;
  }
  size_t staging_chunk_bytes() const override { return 8u << 20; }  // see device.h
  Status scale_async(void* dst, const void* src, size_t count, DataType dt, double factor,
                     DeviceStream* s) override {
    DeviceGuard g;
    UCCL_RETURN_IF_ERROR(use_device(s->ordinal(), &g));
    return launched("scale kernel", launch_scale(dst, src, count, dt, factor, raw(s)));
  }
  Status divide_async(void* dst, const void* src, size_t count, DataType dt, int n, DeviceStream* s) override {
    if (n <= 0) return InvalidArgument("cuda: divide by " + std::to_string(n));
    DeviceGuard g;
    UCCL_RETURN_IF_ERROR(use_device(s->ordinal(), &g));
    return launched("divide kernel", launch_divide(dst, src, count, dt, n, raw(s)));
  }

  Result<std::unique_ptr<DeviceEvent>> create_event() override {
    if (!available(nullptr)) return NotSupported("cuda: " + why_not_);
    return std::unique_ptr<DeviceEvent>(new CudaEvent());
  }
  Status record(DeviceEvent* e, DeviceStream* s) override {
    auto* ev = static_cast<CudaEvent*>(e);
    DeviceGuard g;
    UCCL_RETURN_IF_ERROR(use_device(s->ordinal(), &g));
    if (ev->e_ && ev->ordinal_ != s->ordinal()) ev->reset();
    if (!ev->e_) {
      if (cudaError_t r = cudaEventCreateWithFlags(&ev->e_, cudaEventDisableTiming)) return cuda_error("cudaEventCreate", r);
      ev->ordinal_ = s->ordinal();
    }
    if (cudaError_t r = cudaEventRecord(ev->e_, raw(s))) return cuda_error("cudaEventRecord", r);
    return Status::Ok();
  }
  Result<bool> query(DeviceEvent* e) override {
    auto* ev = static_cast<CudaEvent*>(e);
    if (!ev->e_) return true;  // never recorded
    cudaError_t r = cudaEventQuery(ev->e_);
    if (r == cudaSuccess) return true;
    if (r == cudaErrorNotReady) {
      cudaGetLastError();  // not an error; keep the runtime's last error clean
      return false;
    }
    return cuda_error("cudaEventQuery (a kernel or copy before this event failed)", r);
  }
  Status stream_wait(DeviceStream* s, DeviceEvent* e) override {
    auto* ev = static_cast<CudaEvent*>(e);
    if (!ev->e_) return Status::Ok();
    DeviceGuard g;
    UCCL_RETURN_IF_ERROR(use_device(s->ordinal(), &g));
    if (cudaError_t r = cudaStreamWaitEvent(raw(s), ev->e_, 0)) return cuda_error("cudaStreamWaitEvent", r);
    return Status::Ok();
  }
  Result<std::shared_ptr<DeviceSignal>> create_signal(int ordinal) override {
    DeviceGuard g;
    UCCL_RETURN_IF_ERROR(use_device(ordinal, &g));
    if (!driver().stream_wait_value32) return NotSupported("cuda: the driver lacks cuStreamWaitValue32");
    reap_signals();
    Result<SignalWords::Word> w = signal_words().take();
    if (!w.ok()) return w.status();
    mark_context();
    return std::shared_ptr<DeviceSignal>(std::make_shared<CudaSignal>(w.value()));
  }
  // kSignal: cuStreamWaitValue32, a semaphore acquire that blocks the stream's hardware queue.
  // kKernel: a one-thread kernel polling the word (cuda_kernels.h): the queue moves on and
  // only that stream's later work waits, as behind any running kernel - NCCL's way of waiting
  // for the host. Either relies on uccl's copies running as kernels meanwhile (device.h,
  // device_copy_async); tests/gpu checks both.
  Status stream_wait_signal(DeviceStream* s, const std::shared_ptr<DeviceSignal>& sig, StreamWaitMode how) override {
    auto cs = std::dynamic_pointer_cast<CudaSignal>(sig);
    if (!cs) return InvalidArgument("cuda: not a CUDA signal");
    if (how != StreamWaitMode::kSignal && how != StreamWaitMode::kKernel)
      return InvalidArgument(std::string("cuda: a stream cannot wait by '") + stream_wait_mode_name(how) + "'");
    DeviceGuard g;
    UCCL_RETURN_IF_ERROR(use_device(s->ordinal(), &g));
    preload_kernels(s->ordinal());
    // Under the lock of the synchronizing memory calls: none may be waiting while this is queued.
    return mem_.enqueue_wait([&]() -> Status {
      if (how == StreamWaitMode::kKernel) {
        UCCL_RETURN_IF_ERROR(launched("stream wait kernel",
                                      launch_wait_flag(reinterpret_cast<const void*>(cs->device_address()), raw(s))));
      } else {
        CUresult r = driver().stream_wait_value32(reinterpret_cast<CUstream>(raw(s)), cs->device_address(), 1,
                                                  CU_STREAM_WAIT_VALUE_GEQ);
        if (r != CUDA_SUCCESS)
          return Status(Code::kSystemError, "cuda: cuStreamWaitValue32 failed (CUresult " + std::to_string(r) + ")");
      }
      // The word must outlive the wait: keep the signal until an event recorded behind it completed.
      cudaEvent_t done = nullptr;
      if (cudaError_t e = cudaEventCreateWithFlags(&done, cudaEventDisableTiming)) return cuda_error("cudaEventCreate", e);
      if (cudaError_t e = cudaEventRecord(done, raw(s))) {
        cudaEventDestroy(done);
        return cuda_error("cudaEventRecord", e);
      }
      std::lock_guard<std::mutex> lock(signals_mu_);
      waiting_signals_.push_back({cs, done, s->ordinal()});
      return Status::Ok();
    });
  }
  // CUDA loads kernels lazily (CUDA_MODULE_LOADING=LAZY, PyTorch's default), and loading one may
  // synchronize the device: the first reduce launched by the progress thread while a user's
  // stream waits on our signal would wait for that stream, which waits for the reduce. Loaded
  // here, on the caller's thread, before any wait on the device is queued (NCCL does the same
  // at init with cudaFuncGetAttributes).
  void preload_kernels(int ordinal) {
    if (ordinal < 0 || ordinal >= 64) return;
    std::call_once(preloaded_[ordinal], [] { cuda::preload_kernels(); });
  }
  // Never, for now (device.h): the wait is a flag only the host raises, and the device work that
  // completes the operation is queued after it, on other streams, a dependency CUDA cannot see.
  bool signal_waits_safe(std::string* why) const override {
    if (!available(nullptr)) return true;
    if (why) {
      *why = "CUDA cannot see that a stream waiting on uccl's flag (cuStreamWaitValue32) depends on device work "
             "queued after the wait, and may serialize the two (NVIDIA's warning on stream memory operations; "
             "on an H200 a broadcast into a fresh tensor hung so, with eager module loading too: a copy queued "
             "behind the wait holding the copy engines, it seems; uccl's copies by kernel are to be checked "
             "on a GPU)";
      if (lazy_loading_)
        *why += "; and under lazy module loading a kernel's first launch waits for the whole device to drain";
      *why += ". The host waits for the operation; UCCL_STREAM_WAIT=signal|kernel queues the stream wait anyway";
    }
    return false;
  }
  Result<bool> capturing(DeviceStream* s) override {
    DeviceGuard g;
    UCCL_RETURN_IF_ERROR(use_device(s->ordinal(), &g));
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaError_t e = cudaStreamIsCapturing(raw(s), &st)) return cuda_error("cudaStreamIsCapturing", e);
    return st != cudaStreamCaptureStatusNone;  // an invalidated capture is still one
  }
  Status synchronize(DeviceStream* s) override {
    DeviceGuard g;
    UCCL_RETURN_IF_ERROR(use_device(s->ordinal(), &g));
    if (cudaError_t r = cudaStreamSynchronize(raw(s))) return cuda_error("cudaStreamSynchronize", r);
    return Status::Ok();
  }

 private:
  void probe() const {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice || e != cudaSuccess || n <= 0) {
      cudaGetLastError();
      if (e == cudaErrorInsufficientDriver)
        why_not_ = "no CUDA driver (libcuda.so.1 not found, or older than the CUDA " +
                   std::to_string(CUDART_VERSION / 1000) + " runtime of this build)";
      else if (e == cudaErrorNoDevice || (e == cudaSuccess && n <= 0))
        why_not_ = "no CUDA device visible (check CUDA_VISIBLE_DEVICES)";
      else
        why_not_ = std::string("CUDA unusable: cudaGetDeviceCount failed: ") + cudaGetErrorName(e) + " (" +
                   cudaGetErrorString(e) + ")";
      ok_ = false;
      return;
    }
    count_ = n;
    Driver& d = driver();
    entry("cuPointerGetAttributes", &d.pointer_get_attributes);
    entry("cuPointerGetAttribute", &d.pointer_get_attribute);
    entry("cuDevicePrimaryCtxGetState", &d.primary_ctx_get_state);
    entry("cuMemGetAddressRange", &d.mem_get_address_range);
    entry("cuDeviceGet", &d.device_get);
    entry("cuDeviceGetPCIBusId", &d.device_get_pci_bus_id);
    entry("cuCtxGetCurrent", &d.ctx_get_current);
    entry("cuCtxSetCurrent", &d.ctx_set_current);
    entry("cuStreamWaitValue32", &d.stream_wait_value32);
    entry("cuModuleGetLoadingMode", &d.module_get_loading_mode);
    // Fixed at cuInit (cudaGetDeviceCount above ran it): CUDA_MODULE_LOADING as the process had
    // it then. Unknown counts as lazy, the default.
    CUmoduleLoadingMode mode = CU_MODULE_LAZY_LOADING;
    if (d.module_get_loading_mode && d.module_get_loading_mode(&mode) != CUDA_SUCCESS) mode = CU_MODULE_LAZY_LOADING;
    lazy_loading_ = mode != CU_MODULE_EAGER_LOADING;
    if (!d.pointer_get_attributes || !d.primary_ctx_get_state || !d.device_get) {
      why_not_ = "CUDA driver lacks cuPointerGetAttributes/cuDevicePrimaryCtxGetState";
      ok_ = false;
      return;
    }
    ok_ = true;
  }
  Status use_device(int ordinal, DeviceGuard* g) const {
    if (!available(nullptr)) return NotSupported("cuda: " + why_not_);
    if (ordinal < 0 || ordinal >= count_)
      return InvalidArgument("cuda: device " + std::to_string(ordinal) + " out of range (" +
                             std::to_string(count_) + " devices)");
    if (cudaError_t e = g->set(ordinal)) return cuda_error("cudaSetDevice", e);
    return Status::Ok();
  }
  // Where a kernel on the current device reads `p`: device memory (a peer's IPC mapping too, where
  // the two devices have peer access) and pinned host memory (its mapped address; *host set when
  // given) have one; pageable memory, and another device's without peer access, none (nullptr).
  static const void* device_view(const void* p, bool* host = nullptr) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    if (host) *host = a.type == cudaMemoryTypeHost;
    int cur = 0, can = 0;
    if (a.type == cudaMemoryTypeDevice && cudaGetDevice(&cur) == cudaSuccess && a.device != cur &&
        (cudaDeviceCanAccessPeer(&can, cur, a.device) != cudaSuccess || !can)) {
      cudaGetLastError();
      return nullptr;  // the engines reach it (through the host if need be)
    }
    const bool reachable =
        a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged || a.type == cudaMemoryTypeHost;
    return reachable ? a.devicePointer : nullptr;
  }
  static Status launched(const char* what, int err) {
    if (err == 0) return Status::Ok();
    return cuda_error(what, static_cast<cudaError_t>(err));
  }
  // Whether device i's primary context is active (the process uses that GPU).
  bool context_active(int i) const {
    Driver& d = driver();
    CUdevice dev = 0;
    unsigned int flags = 0;
    int active = 0;
    return d.device_get(&dev, i) == CUDA_SUCCESS && d.primary_ctx_get_state(dev, &flags, &active) == CUDA_SUCCESS &&
           active;
  }
  // The first device whose primary context is active (the one this process uses), else 0.
  int preferred_device() const {
    for (int i = 0; i < count_; ++i)
      if (context_active(i)) return i;
    return 0;
  }
  // The memory calls behind mem_: the device-synchronizing ones, and cudaMallocAsync's.
  Result<void*> malloc_sync(int ordinal, size_t bytes) {
    DeviceGuard g;
    UCCL_RETURN_IF_ERROR(use_device(ordinal, &g));
    void* p = nullptr;
    if (cudaError_t e = cudaMalloc(&p, bytes)) return cuda_error("cudaMalloc", e);
    mark_context();
    return p;
  }
  void free_sync(void* ptr) {
    int ord = preferred_device();
    owns(ptr, &ord);
    DeviceGuard g;
    g.set(ord);
    cudaFree(ptr);
  }
  Result<void*> host_alloc_sync(size_t bytes) {
    DeviceGuard g;  // pinned memory needs a context: one this process already uses
    g.set(preferred_device());
    void* p = nullptr;
    if (cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable)) return cuda_error("cudaHostAlloc", e);
    mark_context();
    return p;
  }
  void host_free_sync(void* ptr) {
    DeviceGuard g;
    g.set(preferred_device());
    cudaFreeHost(ptr);
  }
  // cudaMallocAsync on a stream of our own, which is then synchronized (that stream only), so
  // the memory is usable on every stream when this returns. Freed the same way: the caller has
  // no work in flight on it (as with cudaFree, minus its implicit wait).
  cudaStream_t alloc_stream(int ordinal) {
    std::lock_guard<std::mutex> lock(alloc_streams_mu_);
    cudaStream_t& s = alloc_streams_[ordinal & 63];
    if (!s && cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) s = nullptr;
    return s;
  }
  Result<void*> malloc_unsync(int ordinal, size_t bytes) {
    DeviceGuard g;
    UCCL_RETURN_IF_ERROR(use_device(ordinal, &g));
    cudaStream_t s = alloc_stream(ordinal);
    if (!s) return Status(Code::kSystemError, "cuda: cudaStreamCreate (allocation stream) failed");
    void* p = nullptr;
    if (cudaError_t e = cudaMallocAsync(&p, bytes, s)) return cuda_error("cudaMallocAsync", e);
    if (cudaError_t e = cudaStreamSynchronize(s)) return cuda_error("cudaStreamSynchronize (allocation)", e);
    alloc_ordinal_of_[p] = ordinal;
    return p;
  }
  void free_unsync(void* ptr) {
    auto it = alloc_ordinal_of_.find(ptr);
    const int ord = it == alloc_ordinal_of_.end() ? preferred_device() : it->second;
    if (it != alloc_ordinal_of_.end()) alloc_ordinal_of_.erase(it);
    DeviceGuard g;
    g.set(ord);
    if (cudaStream_t s = alloc_stream(ord)) {
      cudaFreeAsync(ptr, s);
      cudaGetLastError();
    }
  }
  // Whether a stream still waits (or may still wait) on one of our signals.
  bool waits_outstanding() {
    reap_signals();
    std::lock_guard<std::mutex> lock(signals_mu_);
    return !waiting_signals_.empty();
  }

  // Whether any primary context is active: before one is, no pointer is CUDA memory.
  bool any_context() const {
    if (context_seen_.load(std::memory_order_relaxed)) return true;
    for (int i = 0; i < count_; ++i) {
      if (context_active(i)) {
        context_seen_.store(true);
        return true;
      }
    }
    return false;
  }
  void mark_context() { context_seen_.store(true); }
  // Drops the signals whose streams are past their wait (their event completed).
  void reap_signals() {
    std::lock_guard<std::mutex> lock(signals_mu_);
    for (size_t i = 0; i < waiting_signals_.size();) {
      WaitingSignal& w = waiting_signals_[i];
      DeviceGuard g;
      g.set(w.ordinal);
      if (cudaEventQuery(w.done) == cudaErrorNotReady) {
        cudaGetLastError();
        ++i;
        continue;
      }
      cudaEventDestroy(w.done);
      waiting_signals_[i] = std::move(waiting_signals_.back());
      waiting_signals_.pop_back();
    }
  }
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
  mutable bool ok_ = false;
  mutable std::string why_not_;
  mutable int count_ = 0;
  mutable bool lazy_loading_ = true;
  mutable std::atomic<bool> context_seen_{false};
};

}  // namespace

CudaBackend& the_backend() {
  static auto* b = new CudaBackend();  // process lifetime: at exit the CUDA runtime may be gone
  return *b;
}

DeviceBackend* backend_instance() { return &the_backend(); }
SignalSafeMemory& memory_policy() { return the_backend().memory(); }

}  // namespace cuda
}  // namespace uccl
