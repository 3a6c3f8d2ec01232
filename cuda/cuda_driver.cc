// The CUDA module's footing (cuda/cuda_backend_internal.h): the runtime probe, the driver entry
// points resolved through the runtime (the module never links libcuda, so one build loads on a
// machine without a driver and says so), DeviceGuard and the runtime-error -> Status mapping.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "cuda/cuda_backend_internal.h"

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

}  // namespace

RuntimeProbe probe_runtime() {
  RuntimeProbe r;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n <= 0) {
    cudaGetLastError();
    if (e == cudaErrorInsufficientDriver)
      r.why_not = "no CUDA driver (libcuda.so.1 not found, or older than the CUDA " +
                  std::to_string(CUDART_VERSION / 1000) + " runtime of this build)";
    else if (e == cudaErrorNoDevice || e == cudaSuccess)
      r.why_not = "no CUDA device visible (check CUDA_VISIBLE_DEVICES)";
    else
      r.why_not = std::string("CUDA unusable: cudaGetDeviceCount failed: ") + cudaGetErrorName(e) + " (" +
                  cudaGetErrorString(e) + ")";
    return r;
  }
  r.count = n;
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
  // it then.
  CUmoduleLoadingMode mode = CU_MODULE_LAZY_LOADING;
  if (d.module_get_loading_mode && d.module_get_loading_mode(&mode) != CUDA_SUCCESS) mode = CU_MODULE_LAZY_LOADING;
  r.lazy_loading = mode != CU_MODULE_EAGER_LOADING;
  if (!d.pointer_get_attributes || !d.primary_ctx_get_state || !d.device_get) {
    r.why_not = "CUDA driver lacks cuPointerGetAttributes/cuDevicePrimaryCtxGetState";
    return r;
  }
  r.ok = true;
  return r;
}

}  // namespace cuda
}  // namespace uccl
