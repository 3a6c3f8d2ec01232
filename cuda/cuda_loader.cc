// libuccl.so's side of the CUDA backend: opens libuccl_cuda.so at run time and registers the
// device backend "cuda" that forwards to it (see cuda/cuda_module.h for why a module).
//
// The module is looked for next to libuccl.so (the wheel installs both into uccl/, the CMake
// build writes both into its top directory). Nothing is loaded until something asks whether
// CUDA is available (locate_memory, build_info, the cuda_ipc transport), so a host-only
// program never maps the CUDA runtime.
#include <dlfcn.h>

#include <atomic>
#include <mutex>
#include <string>

#include "base/config.h"
#include "base/device.h"
#include "base/log.h"
#include "cuda/cuda_module.h"

namespace uccl {
namespace {

struct Loaded {
  std::once_flag once;
  const CudaModule* module = nullptr;  // set only when loaded *and* available
  const CudaModule* any = nullptr;     // loaded, maybe unavailable
  std::string why;
};

Loaded& loaded() {
  static Loaded l;
  return l;
}

std::string module_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&cuda_module), &info) && info.dli_fname) {
    std::string self = info.dli_fname;
    const size_t slash = self.rfind('/');
    if (slash != std::string::npos) return self.substr(0, slash + 1) + "libuccl_cuda.so";
  }
  return "libuccl_cuda.so";
}

void load(Loaded& l) {
  const std::string path = module_path();
  // RTLD_NOW: a broken module fails here, not in the middle of a transfer.
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    l.why = "cannot load the CUDA module " + path + ": " + (e ? e : "dlopen failed");
    return;
  }
  using Fn = const CudaModule* (*)();
  void* sym = dlsym(lib, "uccl_cuda_module");
  if (!sym) {
    l.why = path + " has no uccl_cuda_module symbol";
    return;
  }
  Fn fn;
  static_assert(sizeof fn == sizeof sym, "function pointer size");
  __builtin_memcpy(&fn, &sym, sizeof fn);
  const CudaModule* m = fn();
  if (!m || m->abi != kCudaModuleAbi || !m->backend || !m->ipc) {
    l.why = path + " is from another uccl build (module ABI " + std::to_string(m ? m->abi : -1) +
            ", expected " + std::to_string(kCudaModuleAbi) + ")";
    return;
  }
  l.any = m;
  std::string why;
  if (!m->backend->available(&why)) {
    l.why = why;
    UCCL_TRACE("cuda: unavailable: %s", why.c_str());
    return;
  }
  l.module = m;
}

const CudaModule* ensure(std::string* why) {
  Loaded& l = loaded();
  std::call_once(l.once, [&l] { load(l); });
  if (!l.module && why) *why = l.why;
  return l.module;
}

Status unavailable() {
  std::string why;
  ensure(&why);
  return NotSupported("cuda: " + why);
}

// Declared here, in libuccl.so, so that `python -m uccl.info` lists it without loading CUDA.
const BoolSetting kCudaReduceFromHost("device", "UCCL_CUDA_REDUCE_FROM_HOST", "0",
                                      "cuda: staged receives that reduce read each chunk straight out of its pinned "
                                      "host slot in the reduce kernel (zero-copy; 0: copied to the device first, "
                                      "until a GPU run measures the two: tests/gpu/bench_gpu.py staged-zc)",
                                      boolean());

// The registered backend: forwards to the module's once it is loaded and available.
class CudaProxy final : public DeviceBackend {
 public:
  const char* name() const override { return "cuda"; }
  MemoryKind kind() const override { return MemoryKind::kCuda; }
  bool available(std::string* why) const override { return ensure(why) != nullptr; }
  int device_count() const override { return b() ? b()->device_count() : 0; }
  bool owns(const void* ptr, int* ordinal) const override { return b() && b()->owns(ptr, ordinal); }
  bool may_own_memory() const override { return b() && b()->may_own_memory(); }
  Result<void*> alloc(int ordinal, size_t bytes) override {
    if (!b()) return unavailable();
    return b()->alloc(ordinal, bytes);
  }
  void free(void* ptr) override {
    if (b()) b()->free(ptr);
  }
  Result<void*> alloc_pinned(size_t bytes) override {
    if (!b()) return unavailable();
    return b()->alloc_pinned(bytes);
  }
  void free_pinned(void* ptr) override {
    if (b()) b()->free_pinned(ptr);
  }
  bool pinned_scarce() override { return b() && b()->pinned_scarce(); }
  bool register_host(void* ptr, size_t bytes) override { return b() && b()->register_host(ptr, bytes); }
  void unregister_host(void* ptr, std::function<void()> then) override {
    if (b()) b()->unregister_host(ptr, std::move(then));
    else then();
  }
  std::string current_pci_bus_id() const override { return b() ? b()->current_pci_bus_id() : ""; }
  Result<std::unique_ptr<DeviceStream>> create_stream(int ordinal) override {
    if (!b()) return unavailable();
    return b()->create_stream(ordinal);
  }
  Result<std::unique_ptr<DeviceStream>> wrap_stream(int ordinal, uintptr_t handle) override {
    if (!b()) return unavailable();
    return b()->wrap_stream(ordinal, handle);
  }
  Status copy_async(void* dst, const void* src, size_t bytes, CopyDir dir, DeviceStream* s) override {
    return b() ? b()->copy_async(dst, src, bytes, dir, s) : unavailable();
  }
  Status copy_by_kernel_async(void* dst, const void* src, size_t bytes, CopyDir dir, DeviceStream* s) override {
    return b() ? b()->copy_by_kernel_async(dst, src, bytes, dir, s) : unavailable();
  }
  Status reduce_async(void* dst, const void* a, const void* bb, size_t count, DataType dt, RedOp op,
                      DeviceStream* s) override {
    return b() ? b()->reduce_async(dst, a, bb, count, dt, op, s) : unavailable();
  }
  const void* kernel_view_of_host(const void* host, int ordinal) const override {
    return b() ? b()->kernel_view_of_host(host, ordinal) : nullptr;
  }
  bool reduces_from_host() const override { return kCudaReduceFromHost.get() && b(); }
  size_t staging_chunk_bytes() const override { return b() ? b()->staging_chunk_bytes() : 0; }
  Status scale_async(void* dst, const void* src, size_t count, DataType dt, double factor,
                     DeviceStream* s) override {
    return b() ? b()->scale_async(dst, src, count, dt, factor, s) : unavailable();
  }
  Status divide_async(void* dst, const void* src, size_t count, DataType dt, int n, DeviceStream* s) override {
    return b() ? b()->divide_async(dst, src, count, dt, n, s) : unavailable();
  }
  Result<std::unique_ptr<DeviceEvent>> create_event() override {
    if (!b()) return unavailable();
    return b()->create_event();
  }
  Status record(DeviceEvent* e, DeviceStream* s) override { return b() ? b()->record(e, s) : unavailable(); }
  Result<bool> query(DeviceEvent* e) override {
    if (!b()) return unavailable();
    return b()->query(e);
  }
  Status stream_wait(DeviceStream* s, DeviceEvent* e) override {
    return b() ? b()->stream_wait(s, e) : unavailable();
  }
  Result<std::shared_ptr<DeviceSignal>> create_signal(int ordinal) override {
    if (!b()) return unavailable();
    return b()->create_signal(ordinal);
  }
  Status stream_wait_signal(DeviceStream* s, const std::shared_ptr<DeviceSignal>& sig, StreamWaitMode how) override {
    return b() ? b()->stream_wait_signal(s, sig, how) : unavailable();
  }
  bool signal_waits_safe(std::string* why) const override {
    if (!b()) return true;  // unavailable: no stream to wait
    return b()->signal_waits_safe(why);
  }
  Result<bool> capturing(DeviceStream* s) override {
    if (!b()) return unavailable();
    return b()->capturing(s);
  }
  Status synchronize(DeviceStream* s) override { return b() ? b()->synchronize(s) : unavailable(); }

 private:
  static DeviceBackend* b() {
    const CudaModule* m = ensure(nullptr);
    return m ? m->backend : nullptr;
  }
};

CudaProxy g_cuda;
[[maybe_unused]] const bool registered = register_device_backend(&g_cuda);

}  // namespace

std::atomic<const CudaModule*> g_test_module{nullptr};

const CudaModule* cuda_module(std::string* why) {
  if (const CudaModule* t = g_test_module.load()) return t;
  return ensure(why);
}

void set_cuda_module_for_testing(const CudaModule* m) { g_test_module.store(m); }

}  // namespace uccl
