// The CUDA backend's memory (cuda/cuda_backend.h): device memory, pinned host memory and
// registered host ranges, all behind SignalSafeMemory (base/signal_safe_memory.h), whose
// operations are the *_sync calls (they synchronize the device) and the *_unsync ones
// (cudaMallocAsync on a stream of the backend's own).
#include <cuda_runtime.h>

#include <functional>
#include <mutex>

#include "base/log.h"
#include "cuda/cuda_backend.h"

namespace uccl {
namespace cuda {

Result<void*> CudaBackend::alloc(int ordinal, size_t bytes) {  // malloc_(un)sync check the device
  if (bytes == 0) return InvalidArgument("cuda: alloc of 0 bytes");
  return mem_.alloc(ordinal, bytes);
}

Result<void*> CudaBackend::alloc_pinned(size_t bytes) {
  if (!available(nullptr)) return NotSupported("cuda: " + probe_.why_not);
  return mem_.alloc_pinned(bytes);
}

bool CudaBackend::register_host(void* ptr, size_t bytes) {
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

void CudaBackend::unregister_host(void* ptr, std::function<void()> then) {
  mem_.run_when_quiet([ptr, then = std::move(then)] {
    if (cudaHostUnregister(ptr) != cudaSuccess) cudaGetLastError();
    then();
  });
}

// The memory calls behind mem_: the device-synchronizing ones, and cudaMallocAsync's.
Result<void*> CudaBackend::malloc_sync(int ordinal, size_t bytes) {
  DeviceGuard g;
  UCCL_RETURN_IF_ERROR(use_device(ordinal, &g));
  void* p = nullptr;
  if (cudaError_t e = cudaMalloc(&p, bytes)) return cuda_error("cudaMalloc", e);
  mark_context();
  return p;
}

void CudaBackend::free_sync(void* ptr) {
  int ord = preferred_device();
  owns(ptr, &ord);
  DeviceGuard g;
  g.set(ord);
  cudaFree(ptr);
}

Result<void*> CudaBackend::host_alloc_sync(size_t bytes) {
  DeviceGuard g;  // pinned memory needs a context: one this process already uses
  g.set(preferred_device());
  void* p = nullptr;
  if (cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable)) return cuda_error("cudaHostAlloc", e);
  mark_context();
  return p;
}

void CudaBackend::host_free_sync(void* ptr) {
  DeviceGuard g;
  g.set(preferred_device());
  cudaFreeHost(ptr);
}

// cudaMallocAsync on a stream of our own, which is then synchronized (that stream only), so
// the memory is usable on every stream when this returns. Freed the same way: the caller has
// no work in flight on it (as with cudaFree, minus its implicit wait).
cudaStream_t CudaBackend::alloc_stream(int ordinal) {
  std::lock_guard<std::mutex> lock(alloc_streams_mu_);
  cudaStream_t& s = alloc_streams_[ordinal & 63];
  if (!s && cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) s = nullptr;
  return s;
}

Result<void*> CudaBackend::malloc_unsync(int ordinal, size_t bytes) {
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

void CudaBackend::free_unsync(void* ptr) {
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

}  // namespace cuda
}  // namespace uccl
