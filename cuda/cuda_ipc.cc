// CUDA IPC inside libuccl_cuda.so: legacy cudaIpc handles of whole allocations, and the
// module's exported entry point (see cuda/cuda_module.h).
//
// Why legacy handles: they cover cudaMalloc memory, which is what PyTorch's caching allocator
// (without expandable segments), CuPy's default pool and JAX's BFC allocator hand out, and
// they need no file-descriptor passing. cuMem VMM allocations (expandable segments) have no
// legacy handle: export_ptr answers kNotSupported and the transport moves those messages
// through the host instead (correct, slower); POSIX-fd VMM export is left for later.
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "cuda/cuda_backend_internal.h"

namespace uccl {
namespace cuda {
namespace {

class Ipc final : public CudaIpc {
 public:
  Result<CudaIpcExport> export_ptr(const void* ptr) override {
    std::string why;
    if (!backend_instance()->available(&why)) return NotSupported("cuda: " + why);
    int ordinal = -1;
    if (!backend_instance()->owns(ptr, &ordinal)) return InvalidArgument("cuda ipc: not CUDA device memory");
    Driver& d = driver();
    if (!d.mem_get_address_range || !d.pointer_get_attribute) return NotSupported("cuda ipc: driver entry points missing");
    DeviceGuard g;
    if (cudaError_t e = g.set(ordinal)) return cuda_error("cudaSetDevice", e);
    CUdeviceptr base = 0;
    size_t size = 0;
    if (d.mem_get_address_range(&base, &size, reinterpret_cast<CUdeviceptr>(ptr)) != CUDA_SUCCESS)
      return NotSupported("cuda ipc: cuMemGetAddressRange failed for this pointer");
    unsigned long long id = 0;
    if (d.pointer_get_attribute(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, reinterpret_cast<CUdeviceptr>(ptr)) != CUDA_SUCCESS)
      return NotSupported("cuda ipc: no buffer id for this pointer");
    cudaIpcMemHandle_t h;
    if (cudaError_t e = cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(base))) {
      cudaGetLastError();
      // VMM (cuMem) allocations and some managed pools have no legacy handle.
      return Status(Code::kNotSupported, std::string("cuda ipc: cudaIpcGetMemHandle: ") + cudaGetErrorName(e));
    }
    CudaIpcExport x;
    static_assert(sizeof(h) == sizeof(x.handle), "cudaIpcMemHandle_t is 64 bytes");
    std::memcpy(x.handle, &h, sizeof h);
    x.offset = reinterpret_cast<CUdeviceptr>(ptr) - base;
    x.alloc_bytes = size;
    x.buffer_id = id;
    x.ordinal = ordinal;
    return x;
  }

  // Mappings are shared by the whole process and counted: CUDA refuses to open one handle
  // twice in a process (cudaErrorAlreadyMapped on some drivers), and two communicators over
  // the same pair of processes map the same allocations.
  Result<void*> open(const CudaIpcExport& x, int ordinal) override {
    std::lock_guard<std::mutex> lock(mu_);
    Key k{std::string(reinterpret_cast<const char*>(x.handle), sizeof x.handle), ordinal};
    auto it = maps_.find(k);
    if (it != maps_.end()) {
      ++it->second.refs;
      return it->second.base;
    }
    DeviceGuard g;
    if (cudaError_t e = g.set(ordinal)) return cuda_error("cudaSetDevice", e);
    cudaIpcMemHandle_t h;
    std::memcpy(&h, x.handle, sizeof h);
    void* p = nullptr;
    if (cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess)) {
      cudaGetLastError();
      return cuda_error("cudaIpcOpenMemHandle", e);
    }
    maps_[k] = Mapping{p, 1};
    return p;
  }

  // cudaIpcCloseMemHandle synchronizes the device, so it runs only while no stream waits on a
  // signal of ours (memory_policy(); the caller is the progress thread). Until then the mapping
  // stays in maps_ with no references, and an open() of the same handle takes it back.
  Status close(void* base, int ordinal) override {
    Key key;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = maps_.begin();
      for (; it != maps_.end(); ++it)
        if (it->second.base == base && it->first.second == ordinal && it->second.refs > 0) break;
      if (it == maps_.end()) return InvalidArgument("cuda ipc: close of a mapping that is not open");
      if (--it->second.refs > 0) return Status::Ok();
      key = it->first;
    }
    memory_policy().run_when_quiet([this, key] {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = maps_.find(key);
      if (it == maps_.end() || it->second.refs > 0) return;  // opened again meanwhile
      void* b = it->second.base;
      maps_.erase(it);
      DeviceGuard g;
      g.set(key.second);
      if (cudaIpcCloseMemHandle(b) != cudaSuccess) cudaGetLastError();
    });
    return Status::Ok();
  }

  int device_by_pci(const std::string& pci) override {
    int dev = -1;
    if (cudaDeviceGetByPCIBusId(&dev, pci.c_str()) != cudaSuccess) {
      cudaGetLastError();
      return -1;
    }
    return dev;
  }
  bool context_active() override {
    // Asks the driver per device; creates nothing.
    Driver& d = driver();
    if (!backend_instance()->available(nullptr) || !d.device_get || !d.primary_ctx_get_state) return false;
    const int n = backend_instance()->device_count();
    for (int i = 0; i < n; ++i) {
      CUdevice dev = 0;
      unsigned int flags = 0;
      int active = 0;
      if (d.device_get(&dev, i) == CUDA_SUCCESS && d.primary_ctx_get_state(dev, &flags, &active) == CUDA_SUCCESS &&
          active)
        return true;
    }
    return false;
  }
  std::string pci_bus_id(int ordinal) override {
    char buf[32] = {0};
    if (cudaDeviceGetPCIBusId(buf, sizeof buf, ordinal) != cudaSuccess) {
      cudaGetLastError();
      return "";
    }
    return buf;
  }

 private:
  using Key = std::pair<std::string, int>;  // handle bytes, device
  struct Mapping {
    void* base = nullptr;
    int refs = 0;
  };
  std::mutex mu_;
  std::map<Key, Mapping> maps_;
};

}  // namespace

CudaIpc* ipc_instance() {
  static Ipc ipc;
  return &ipc;
}

}  // namespace cuda
}  // namespace uccl

extern "C" __attribute__((visibility("default"))) const uccl::CudaModule* uccl_cuda_module() {
  static const uccl::CudaModule m = [] {
    uccl::CudaModule x;
    x.abi = uccl::kCudaModuleAbi;
    x.backend = uccl::cuda::backend_instance();
    x.ipc = uccl::cuda::ipc_instance();
    return x;
  }();
  return &m;
}
