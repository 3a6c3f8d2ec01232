// Shared inside libuccl_cuda.so only (the backend's files, cuda_ipc.cc): the driver entry
// points the backend resolves through the runtime (cudaGetDriverEntryPointByVersion, so the
// module never links libcuda; cuda_driver.cc), the runtime probe, the runtime-error -> Status
// mapping and the two singletons.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <string>

#include "base/signal_safe_memory.h"
#include "cuda/cuda_module.h"

namespace uccl {
namespace cuda {

struct Driver {
  CUresult (*pointer_get_attributes)(unsigned int, CUpointer_attribute*, void**, CUdeviceptr) = nullptr;
  CUresult (*pointer_get_attribute)(void*, CUpointer_attribute, CUdeviceptr) = nullptr;
  CUresult (*primary_ctx_get_state)(CUdevice, unsigned int*, int*) = nullptr;
  CUresult (*mem_get_address_range)(CUdeviceptr*, size_t*, CUdeviceptr) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*ctx_get_current)(CUcontext*) = nullptr;
  CUresult (*ctx_set_current)(CUcontext) = nullptr;
  CUresult (*device_get_pci_bus_id)(char*, int, CUdevice) = nullptr;  // optional
  CUresult (*stream_wait_value32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int) = nullptr;  // optional
  CUresult (*module_get_loading_mode)(CUmoduleLoadingMode*) = nullptr;  // optional
};
Driver& driver();  // filled by probe_runtime()

// What the runtime and the driver said at the backend's first available(): cudaGetDeviceCount
// (which runs cuInit), then the driver entry points into driver().
struct RuntimeProbe {
  bool ok = false;
  std::string why_not;       // when !ok: why CUDA is unusable here
  int count = 0;             // devices visible
  bool lazy_loading = true;  // CUDA_MODULE_LOADING as cuInit saw it (unknown counts as lazy, the default)
};
RuntimeProbe probe_runtime();

// "cuda: <call> failed: cudaErrorX (text)": kInvalidArgument for bad values/pointers/devices,
// kSystemError otherwise.
Status cuda_error(const char* call, cudaError_t e);

// Makes `ordinal` the calling thread's device for a scope and puts the thread's previous
// context back afterwards (cuCtxGetCurrent / cuCtxSetCurrent, which, unlike cudaSetDevice,
// never creates a context): calls from a user's thread must not change its current device,
// nor leave a context on device 0 of a process that only uses device 1.
class DeviceGuard {
 public:
  cudaError_t set(int ordinal);
  ~DeviceGuard();

 private:
  bool saved_ = false;
  CUcontext prev_ = nullptr;
};

DeviceBackend* backend_instance();
// The backend's policy for device-synchronizing calls (base/signal_safe_memory.h), for the IPC
// side's cudaIpcCloseMemHandle.
SignalSafeMemory& memory_policy();
CudaIpc* ipc_instance();

}  // namespace cuda
}  // namespace uccl
