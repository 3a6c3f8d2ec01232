// The CUDA backend's identity, pointer ownership, streams, copies, kernels and events
// (cuda/cuda_backend.h says how the class is split and why it behaves as it does).
#include <cuda.h>
#include <cuda_runtime.h>

#include <cctype>
#include <memory>
#include <mutex>
#include <string>

#include "base/log.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_kernels.h"

namespace uccl {
namespace cuda {

bool CudaBackend::available(std::string* why) const {
  std::call_once(probe_once_, [this] { probe_ = probe_runtime(); });
  if (!probe_.ok && why) *why = probe_.why_not;
  return probe_.ok;
}

bool CudaBackend::owns(const void* ptr, int* ordinal) const {
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

std::string CudaBackend::current_pci_bus_id() const {
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

Result<std::unique_ptr<DeviceStream>> CudaBackend::create_stream(int ordinal) {
  DeviceGuard g;
  UCCL_RETURN_IF_ERROR(use_device(ordinal, &g));
  cudaStream_t s = nullptr;
  if (cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) return cuda_error("cudaStreamCreate", e);
  mark_context();
  return std::unique_ptr<DeviceStream>(new CudaStream(ordinal, s, false));
}

Result<std::unique_ptr<DeviceStream>> CudaBackend::wrap_stream(int ordinal, uintptr_t handle) {
  DeviceGuard g;
  UCCL_RETURN_IF_ERROR(use_device(ordinal, &g));
  mark_context();
  return std::unique_ptr<DeviceStream>(new CudaStream(ordinal, reinterpret_cast<cudaStream_t>(handle), true));
}

Status CudaBackend::copy_async(void* dst, const void* src, size_t bytes, CopyDir dir, DeviceStream* s) {
  if (bytes == 0) return Status::Ok();
  DeviceGuard g;
  UCCL_RETURN_IF_ERROR(use_device(s->ordinal(), &g));
  // cudaMemcpyDefault: the driver knows every pointer's kind (unified addressing); a pageable
  // host side is staged by the driver, pinned memory goes by DMA.
  (void)dir;
  if (cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, raw(s))) return cuda_error("cudaMemcpyAsync", e);
  return Status::Ok();
}

Status CudaBackend::copy_by_kernel_async(void* dst, const void* src, size_t bytes, CopyDir dir, DeviceStream* s) {
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

Status CudaBackend::reduce_async(void* dst, const void* a, const void* b, size_t count, DataType dt, RedOp op,
                    DeviceStream* s) {
  DeviceGuard g;
  UCCL_RETURN_IF_ERROR(use_device(s->ordinal(), &g));
  return launched("reduce kernel", launch_reduce(dst, a, b, count, dt, op, raw(s)));
}

const void* CudaBackend::kernel_view_of_host(const void* host, int ordinal) const {
  if (!available(nullptr) || !host) return nullptr;
  DeviceGuard g;
  if (!use_device(ordinal, &g).ok()) return nullptr;
  bool is_host = false;
  const void* v = device_view(host, &is_host);
  return is_host ? v : nullptr;
}

Status CudaBackend::scale_async(void* dst, const void* src, size_t count, DataType dt, double factor,
                   DeviceStream* s) {
  DeviceGuard g;
  UCCL_RETURN_IF_ERROR(use_device(s->ordinal(), &g));
  return launched("scale kernel", launch_scale(dst, src, count, dt, factor, raw(s)));
}

Status CudaBackend::divide_async(void* dst, const void* src, size_t count, DataType dt, int n, DeviceStream* s) {
  if (n <= 0) return InvalidArgument("cuda: divide by " + std::to_string(n));
  DeviceGuard g;
  UCCL_RETURN_IF_ERROR(use_device(s->ordinal(), &g));
  return launched("divide kernel", launch_divide(dst, src, count, dt, n, raw(s)));
}

Result<std::unique_ptr<DeviceEvent>> CudaBackend::create_event() {
  if (!available(nullptr)) return NotSupported("cuda: " + probe_.why_not);
  return std::unique_ptr<DeviceEvent>(new CudaEvent());
}

Status CudaBackend::record(DeviceEvent* e, DeviceStream* s) {
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

Result<bool> CudaBackend::query(DeviceEvent* e) {
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

Status CudaBackend::stream_wait(DeviceStream* s, DeviceEvent* e) {
  auto* ev = static_cast<CudaEvent*>(e);
  if (!ev->e_) return Status::Ok();
  DeviceGuard g;
  UCCL_RETURN_IF_ERROR(use_device(s->ordinal(), &g));
  if (cudaError_t r = cudaStreamWaitEvent(raw(s), ev->e_, 0)) return cuda_error("cudaStreamWaitEvent", r);
  return Status::Ok();
}

Result<bool> CudaBackend::capturing(DeviceStream* s) {
  DeviceGuard g;
  UCCL_RETURN_IF_ERROR(use_device(s->ordinal(), &g));
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaError_t e = cudaStreamIsCapturing(raw(s), &st)) return cuda_error("cudaStreamIsCapturing", e);
  return st != cudaStreamCaptureStatusNone;  // an invalidated capture is still one
}

Status CudaBackend::synchronize(DeviceStream* s) {
  DeviceGuard g;
  UCCL_RETURN_IF_ERROR(use_device(s->ordinal(), &g));
  if (cudaError_t r = cudaStreamSynchronize(raw(s))) return cuda_error("cudaStreamSynchronize", r);
  return Status::Ok();
}

Status CudaBackend::use_device(int ordinal, DeviceGuard* g) const {
  if (!available(nullptr)) return NotSupported("cuda: " + probe_.why_not);
  if (ordinal < 0 || ordinal >= probe_.count)
    return InvalidArgument("cuda: device " + std::to_string(ordinal) + " out of range (" +
                           std::to_string(probe_.count) + " devices)");
  if (cudaError_t e = g->set(ordinal)) return cuda_error("cudaSetDevice", e);
  return Status::Ok();
}

// Where a kernel on the current device reads `p`: device memory (a peer's IPC mapping too, where
// the two devices have peer access) and pinned host memory (its mapped address; *host set when
// given) have one; pageable memory, and another device's without peer access, none (nullptr).
const void* CudaBackend::device_view(const void* p, bool* host) {
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

Status CudaBackend::launched(const char* what, int err) {
  if (err == 0) return Status::Ok();
  return cuda_error(what, static_cast<cudaError_t>(err));
}

// Whether device i's primary context is active (the process uses that GPU).
bool CudaBackend::context_active(int i) const {
  Driver& d = driver();
  CUdevice dev = 0;
  unsigned int flags = 0;
  int active = 0;
  return d.device_get(&dev, i) == CUDA_SUCCESS && d.primary_ctx_get_state(dev, &flags, &active) == CUDA_SUCCESS &&
         active;
}

// The first device whose primary context is active (the one this process uses), else 0.
int CudaBackend::preferred_device() const {
  for (int i = 0; i < probe_.count; ++i)
    if (context_active(i)) return i;
  return 0;
}

// Whether any primary context is active: before one is, no pointer is CUDA memory.
bool CudaBackend::any_context() const {
  if (context_seen_.load(std::memory_order_relaxed)) return true;
  for (int i = 0; i < probe_.count; ++i) {
    if (context_active(i)) {
      context_seen_.store(true);
      return true;
    }
  }
  return false;
}

CudaBackend& the_backend() {
  static auto* b = new CudaBackend();  // process lifetime: at exit the CUDA runtime may be gone
  return *b;
}

DeviceBackend* backend_instance() { return &the_backend(); }
SignalSafeMemory& memory_policy() { return the_backend().memory(); }

}  // namespace cuda
}  // namespace uccl
