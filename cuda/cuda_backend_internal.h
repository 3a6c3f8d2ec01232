// Shared inside libuccl_cuda.so only (cuda_backend.cc, cuda_ipc.cc): the driver entry points
// the backend resolves through the runtime (cudaGetDriverEntryPointByVersion, so the module
// never links libcuda), the runtime-error -> Status mapping and the two singletons.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include "cuda/cuda_module.h"

namespace uccl {
namespace cuda {

struct Driver {
  CUresult (*pointer_get_attributes)(unsigned int, CUpointer_attribute*, void**, CUdeviceptr) = nullptr;
  CUresult (*pointer_get_attribute)(void*, CUpointer_attribute, CUdeviceptr) = nullptr;
  CUresult (*primary_ctx_get_state)(CUdevice, unsigned int*, int*) = nullptr;
  CUresult (*mem_get_address_range)(CUdeviceptr*, size_t*, CUdeviceptr) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
};
Driver& driver();  // filled by the backend's first available()

// "cuda: <call> failed: cudaErrorX (text)": kInvalidArgument for bad values/pointers/devices,
// kSystemError otherwise.
Status cuda_error(const char* call, cudaError_t e);

DeviceBackend* backend_instance();
CudaIpc* ipc_instance();

}  // namespace cuda
}  // namespace uccl
