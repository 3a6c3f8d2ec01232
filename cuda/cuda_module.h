// The CUDA backend, and how the core reaches it without linking CUDA.
//
// Why a separate module: one build of uccl must import on machines without a GPU, without a
// CUDA driver and without a CUDA toolkit (CI, CPU clusters, the other vendors' hosts), the way
// libibverbs is opened at run time (transports/verbs/ibverbs_loader.cc). So libuccl.so has no
// link-time dependency on CUDA at all. Everything that calls CUDA lives in libuccl_cuda.so
// (cuda/cuda_backend.h and its files, cuda/cuda_ipc.cc, cuda/cuda_kernels.cu), which is linked with the
// *static* CUDA runtime: the only CUDA library it needs at run time is the driver
// (libcuda.so.1), which the static runtime itself opens with dlopen. That gives three clean
// answers from one build:
//   * libuccl_cuda.so not built or not found next to libuccl.so: "not built";
//   * no driver (this container, CI): the runtime answers cudaErrorInsufficientDriver and
//     the backend reports "no CUDA driver";
//   * a driver but no device: "no CUDA device".
// The static runtime is NCCL's choice too: streams and pointers of PyTorch's or CuPy's own
// runtime are driver objects (a cudaStream_t is a CUstream, pointers live in the one primary
// context per device), so they work across runtimes.
//
// libuccl.so side (cuda/cuda_loader.cc): registers a device backend named "cuda" that loads
// the module on first use (available()) and forwards every call to the module's backend; and
// cuda_module() for the CUDA IPC transport (transports/cuda_ipc), which needs IPC handles that
// the vendor-neutral DeviceBackend interface does not have.
//
// The module exports one C symbol, uccl_cuda_module(), returning a CudaModule whose abi field
// must equal kCudaModuleAbi (both sides are built from one tree; a stale module is refused).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/device.h"
#include "uccl/status.h"

namespace uccl {

constexpr int kCudaModuleAbi = 2;

// What a peer process needs to map a CUDA allocation: the legacy IPC handle of the allocation
// containing a pointer, and where the pointer is in it. buffer_id is unique per allocation in
// the exporting process (the driver's CU_POINTER_ATTRIBUTE_BUFFER_ID), so an importer caches
// its mapping by (peer, buffer_id) and maps each allocation once.
struct CudaIpcExport {
  uint8_t handle[64];        // cudaIpcMemHandle_t
  uint64_t offset = 0;       // ptr - allocation base
  uint64_t alloc_bytes = 0;  // size of the allocation
  uint64_t buffer_id = 0;
  int32_t ordinal = -1;      // the device of the allocation in the exporter's numbering
  int32_t pad = 0;
};
static_assert(sizeof(CudaIpcExport) == 96, "CudaIpcExport travels on the wire");

class CudaIpc {
 public:
  virtual ~CudaIpc() = default;
  // The export of the allocation holding ptr. kNotSupported for memory that has no legacy IPC
  // handle (cuMem VMM allocations such as PyTorch's expandable segments): the caller then
  // moves that message another way.
  virtual Result<CudaIpcExport> export_ptr(const void* ptr) = 0;
  // Maps a peer's allocation into this process on device `ordinal` (peer access enabled
  // lazily): the base address of the mapping. Mappings are process-wide and counted (CUDA
  // may refuse a second open of one handle): every open() needs one close().
  virtual Result<void*> open(const CudaIpcExport& e, int ordinal) = 0;
  virtual Status close(void* base, int ordinal) = 0;
  // The device a stream of this process should use to read a peer's memory that lives on the
  // peer's device `ordinal`: the same physical device by PCI bus id, or -1 (CUDA_VISIBLE_DEVICES
  // may number devices differently in each process).
  virtual int device_by_pci(const std::string& pci_bus_id) = 0;
  virtual std::string pci_bus_id(int ordinal) = 0;
  // Whether this process has a CUDA primary context on some device (it uses the GPU). Asks
  // the driver without creating one.
  virtual bool context_active() = 0;
};

struct CudaModule {
  int abi = 0;
  DeviceBackend* backend = nullptr;  // name "cuda", kind kCuda
  CudaIpc* ipc = nullptr;
};

// libuccl.so: the loaded module, or nullptr and *why (not built / not found / no driver / no
// device). Loads once; thread safe. An unavailable CUDA answers nullptr.
const CudaModule* cuda_module(std::string* why);
// Tests only: makes cuda_module() answer `m` (nullptr: back to the real module). The
// registered "cuda" device backend keeps forwarding to the real module.
void set_cuda_module_for_testing(const CudaModule* m);

}  // namespace uccl

extern "C" {
// Exported by libuccl_cuda.so.
const uccl::CudaModule* uccl_cuda_module();
}
