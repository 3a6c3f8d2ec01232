// A PrivateUse1 test device for the uccl torch backend's staged path (issue 15, item 3).
//
// Host memory behind its own allocator, reachable by torch only through this device's kernels:
// tensors are created by empty / empty_strided, moved by _copy_from (the device's copy
// function: every host<->device transfer torch makes goes through it, and is counted), and
// every other op runs through torch's CPU fallback (which itself copies through _copy_from).
// A device guard with one device and numbered streams stands in for a real runtime. Built by
// tests/torch/test_torch_device.py with torch.utils.cpp_extension (no network), renamed
// "uccltest" there.
//
// With use_uccl_sim_memory() (before the first tensor) its memory is uccl's simulated device
// instead (cpp/base/sim_device.h: host code cannot touch it, only that backend's stream
// workers can): uccl owns it, so the backend uses these tensors in place, ordered on the
// current stream, whose native handle is a simulated stream's (new_stream / set_stream). The
// device's copies are then simulated-device copies queued on the current stream: synchronous,
// except host-to-device with non_blocking=True, which only queues (the stream-ordering tests
// rely on that). That is the test stand-in for CUDA tensors (issue 15, items 1 and 2).
#include <torch/extension.h>

#include <ATen/EmptyTensor.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/core/impl/alloc_cpu.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "base/device.h"

namespace {

constexpr c10::DeviceType kDev = c10::DeviceType::PrivateUse1;

std::atomic<int64_t> g_d2h_calls{0}, g_h2d_calls{0}, g_d2d_calls{0};
std::atomic<int64_t> g_d2h_bytes{0}, g_h2d_bytes{0};
std::atomic<int64_t> g_fail_copies{0};  // the next N copies throw (error-path tests)
std::atomic<bool> g_fail_h2d_only{false};  // ... counting only host-to-device ones
std::atomic<int64_t> g_skip_copies{0};     // ... after letting this many (counted) pass
// Host memory, freed by its own deleter: torch sees it only as this device's memory.
struct PlainAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* p = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    return {p, p, &release, c10::Device(kDev, 0)};
  }
  static void release(void* p) {
    if (p) c10::free_cpu(p);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const final { default_copy_data(dest, src, count); }
};
PlainAllocator g_alloc;

// Pinned host memory (what a non-blocking copy to the CPU lands in: torch.distributed.checkpoint
// stages a device's tensors so): plain CPU memory, remembered (start -> bytes) so that
// is_pinned() tells it apart, views into it included.
std::mutex g_pinned_mu;
auto* g_pinned = new std::map<uintptr_t, size_t>();  // never destroyed: tensors may outlive static teardown
struct PinnedAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* p = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    if (p) {
      std::lock_guard<std::mutex> lk(g_pinned_mu);
      (*g_pinned)[reinterpret_cast<uintptr_t>(p)] = nbytes;
    }
    return {p, p, &release, c10::Device(c10::kCPU)};
  }
  static void release(void* p) {
    if (!p) return;
    {
      std::lock_guard<std::mutex> lk(g_pinned_mu);
      g_pinned->erase(reinterpret_cast<uintptr_t>(p));
    }
    c10::free_cpu(p);
  }
  static bool owns(const void* p) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> lk(g_pinned_mu);
    auto it = g_pinned->upper_bound(a);
    if (it == g_pinned->begin()) return false;
    --it;
    return a < it->first + it->second;
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const final { default_copy_data(dest, src, count); }
};
PinnedAllocator g_pinned_alloc;

// ---- uccl's simulated device behind the tensors (use_uccl_sim_memory) ----
std::atomic<bool> g_sim{false};
uccl::DeviceBackend* sim() {
  static uccl::DeviceBackend* b = uccl::find_device_backend("sim");
  TORCH_CHECK(b != nullptr && b->available(nullptr), "uccltest: uccl has no simulated device");
  return b;
}
void check_ok(const uccl::Status& s, const char* what) { TORCH_CHECK(s.ok(), "uccltest: ", what, ": ", s.to_string()); }
void free_after_recorded_streams(void* p);
struct SimAllocator final : c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* p = nullptr;
    if (nbytes) {
      auto r = sim()->alloc(0, nbytes);
      check_ok(r.status(), "alloc");
      p = r.value();
    }
    return {p, p, &release, c10::Device(kDev, 0)};
  }
  static void release(void* p) {
    if (!p) return;
    free_after_recorded_streams(p);
    sim()->free(p);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void*, const void*, std::size_t) const final { TORCH_CHECK(false, "uccltest: copy_data on sim memory"); }
};
SimAllocator g_sim_alloc;
c10::Allocator* allocator() { return g_sim.load() ? static_cast<c10::Allocator*>(&g_sim_alloc) : &g_alloc; }

// One device, streams numbered per (device, id); the "current" stream is thread local.
thread_local c10::StreamId t_stream = 0;
std::atomic<bool> g_capturing{false};  // set_capturing(): "the current stream records a graph"
struct TestGuard final : c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kDev; }
  c10::Device exchangeDevice(c10::Device) const override { return c10::Device(kDev, 0); }
  c10::Device getDevice() const override { return c10::Device(kDev, 0); }
  void setDevice(c10::Device d) const override { TORCH_CHECK(d.index() <= 0, "uccltest has one device"); }
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device d) const noexcept override {
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDev, 0), t_stream);
  }
  c10::Stream getDefaultStream(c10::Device) const override { return c10::Stream(c10::Stream::DEFAULT, c10::Device(kDev, 0)); }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override {
    c10::Stream old(c10::Stream::UNSAFE, c10::Device(kDev, 0), t_stream);
    t_stream = s.id();
    return old;
  }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  // torch.Stream(device="uccltest") and the device module's Stream (FSDP2's side streams).
  c10::Stream getStreamFromGlobalPool(c10::Device, bool) const override { return new_pool_stream(); }
  c10::Stream getNewStream(c10::Device, int) const override { return new_pool_stream(); }
  // Host memory: its work is synchronous, so events are always complete and waits are nothing.
  // uccl's simulated memory (use_uccl_sim_memory): events are the simulated device's, recorded
  // on and waited for by its streams (torch.Event, Stream.wait_stream/wait_event, FSDP2).
  void record(void** event, const c10::Stream& s, const c10::DeviceIndex, const c10::EventFlag) const override;
  void block(void* event, const c10::Stream& s) const override;
  bool queryEvent(void* event) const override;
  void synchronizeEvent(void* event) const override;
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override;
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream& s) const override;
  static c10::Stream new_pool_stream();
  bool isStreamCapturing(const c10::Stream&) const override { return g_capturing.load(); }
  void* getStreamNativeHandle(const c10::Stream s) const override {
    return reinterpret_cast<void*>(static_cast<uintptr_t>(s.id()));
  }
  void synchronizeDevice(const c10::DeviceIndex) const override {}
};
C10_REGISTER_GUARD_IMPL(PrivateUse1, TestGuard);

// A stream as a simulated-device stream (its id is the native handle; 0: default).
std::unique_ptr<uccl::DeviceStream> sim_stream(c10::StreamId id) {
  auto st = sim()->wrap_stream(0, static_cast<uintptr_t>(id));
  check_ok(st.status(), "wrap_stream");
  return st.take();
}
std::unique_ptr<uccl::DeviceStream> sim_current_stream() { return sim_stream(t_stream); }
// Streams made by new_stream(), alive for the process and never destroyed: a stream's worker
// thread must not be torn down by this library's static destructors, which run in no set order
// with uccl's (seen: a corrupted heap at exit).
std::mutex g_streams_mu;
auto* g_streams = new std::vector<std::unique_ptr<uccl::DeviceStream>>();

// Tensor.record_stream(s): the memory is not freed before the work queued on s by then is done
// (what a caching allocator does with events; here the free waits for those streams). Host
// memory's work is synchronous: nothing to wait for.
std::mutex g_recorded_mu;
auto* g_recorded = new std::map<void*, std::set<c10::StreamId>>();  // allocation -> streams
void record_stream(at::Tensor& self, c10::Stream s) {
  if (!g_sim.load() || !self.storage().data_ptr().get_context()) return;
  std::lock_guard<std::mutex> lk(g_recorded_mu);
  (*g_recorded)[self.storage().data_ptr().get_context()].insert(s.id());
}
void free_after_recorded_streams(void* p) {
  std::set<c10::StreamId> streams;
  {
    std::lock_guard<std::mutex> lk(g_recorded_mu);
    auto it = g_recorded->find(p);
    if (it == g_recorded->end()) return;
    streams.swap(it->second);
    g_recorded->erase(it);
  }
  for (c10::StreamId id : streams) {
    const uccl::Status st = sim()->synchronize(sim_stream(id).get());
    if (!st.ok()) TORCH_WARN("uccltest: freeing after stream ", id, ": ", st.to_string());  // a deleter may not throw
  }
}

// A new simulated stream (kept in g_streams); its handle is its id.
uint64_t new_sim_stream() {
  auto st = sim()->create_stream(0);
  check_ok(st.status(), "create_stream");
  std::lock_guard<std::mutex> lk(g_streams_mu);
  g_streams->push_back(st.take());
  return static_cast<uint64_t>(g_streams->back()->handle());
}
// A pool stream: a simulated one with sim memory, else just an id of its own (host memory's
// work is synchronous).
c10::Stream TestGuard::new_pool_stream() {
  static std::atomic<uint64_t> next{1 << 20};
  const uint64_t id = g_sim.load() ? new_sim_stream() : next++;
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDev, 0), static_cast<c10::StreamId>(id));
}
void TestGuard::synchronizeStream(const c10::Stream& s) const {
  if (g_sim.load()) check_ok(sim()->synchronize(sim_stream(s.id()).get()), "synchronize");
}
void TestGuard::record(void** event, const c10::Stream& s, const c10::DeviceIndex, const c10::EventFlag) const {
  if (!g_sim.load()) return;
  if (*event == nullptr) {
    auto e = sim()->create_event();
    check_ok(e.status(), "create_event");
    *event = e.take().release();
  }
  check_ok(sim()->record(static_cast<uccl::DeviceEvent*>(*event), sim_stream(s.id()).get()), "record");
}
void TestGuard::block(void* event, const c10::Stream& s) const {
  if (event == nullptr) return;  // never recorded: nothing to wait for
  check_ok(sim()->stream_wait(sim_stream(s.id()).get(), static_cast<uccl::DeviceEvent*>(event)), "stream_wait");
}
bool TestGuard::queryEvent(void* event) const {
  if (event == nullptr) return true;
  auto r = sim()->query(static_cast<uccl::DeviceEvent*>(event));
  check_ok(r.status(), "query");
  return r.value();
}
void TestGuard::synchronizeEvent(void* event) const {
  while (!queryEvent(event)) std::this_thread::yield();
}
void TestGuard::destroyEvent(void* event, const c10::DeviceIndex) const noexcept {
  delete static_cast<uccl::DeviceEvent*>(event);
}

uccl::CopyDir dir_of(bool src_dev, bool dst_dev) {
  return src_dev ? (dst_dev ? uccl::CopyDir::kDeviceToDevice : uccl::CopyDir::kDeviceToHost)
                 : (dst_dev ? uccl::CopyDir::kHostToDevice : uccl::CopyDir::kHostToHost);
}
void sim_copy(void* dst, const void* src, size_t bytes, uccl::CopyDir dir, bool sync) {
  if (bytes == 0) return;
  auto st = sim_current_stream();
  check_ok(sim()->copy_async(dst, src, bytes, dir, st.get()), "copy");
  if (sync) check_ok(sim()->synchronize(st.get()), "synchronize");
}
// A host copy of a device tensor's whole storage, read on the current stream.
at::Tensor storage_to_host(const at::Tensor& t) {
  const int64_t nbytes = static_cast<int64_t>(t.storage().nbytes());
  at::Tensor raw = at::empty({nbytes}, at::kByte);
  sim_copy(raw.data_ptr(), t.storage().data(), nbytes, uccl::CopyDir::kDeviceToHost, true);
  return raw;
}
// t's elements inside a host copy of its storage.
at::Tensor view_in(const at::Tensor& t, const at::Tensor& raw) {
  return at::from_blob(static_cast<uint8_t*>(raw.data_ptr()) + t.storage_offset() * t.element_size(), t.sizes(),
                       t.strides(), t.options().device(at::kCPU));
}
// dst.copy_(src) where either side is simulated-device memory: whole contiguous buffers of one
// dtype go as one copy; anything else through host copies of the storages.
void sim_copy_tensor(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  const bool sd = !src.is_cpu(), dd = !dst.is_cpu();
  if (src.is_contiguous() && dst.is_contiguous() && src.scalar_type() == dst.scalar_type() && src.numel() == dst.numel()) {
    // Only host-to-device copies may stay queued (their host source is the caller's to keep).
    sim_copy(dst.data_ptr(), src.data_ptr(), src.numel() * src.element_size(), dir_of(sd, dd), !(non_blocking && !sd && dd));
    return;
  }
  at::Tensor s_raw = sd ? storage_to_host(src) : at::Tensor();
  at::Tensor s_host = sd ? view_in(src, s_raw) : src;
  if (!dd) {
    dst.copy_(s_host);
    return;
  }
  at::Tensor d_raw = storage_to_host(dst);
  view_in(dst, d_raw).copy_(s_host);
  sim_copy(dst.storage().mutable_data(), d_raw.data_ptr(), d_raw.numel(), uccl::CopyDir::kHostToDevice, true);
}

// A storage's new memory from the device's allocator, the old bytes copied over by the device
// (torch's resize_ of a tensor that must grow: an output of another size handed to an op).
void resize_storage(const c10::Storage& storage, size_t newsize) {
  TORCH_CHECK(storage.resizable(), "uccltest: resizing a storage that is not resizable");
  c10::Allocator* a = storage.allocator() ? storage.allocator() : allocator();
  c10::DataPtr fresh = a->allocate(newsize);
  const size_t keep = std::min(newsize, storage.nbytes());
  if (keep && storage.data()) {
    if (a == &g_sim_alloc)
      sim_copy(fresh.get(), storage.data(), keep, uccl::CopyDir::kDeviceToDevice, true);
    else
      std::memcpy(fresh.get(), storage.data(), keep);
  }
  storage.set_data_ptr_noswap(std::move(fresh));
  storage.set_nbytes(newsize);
}

struct TestHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return 1; }
  c10::DeviceIndex getCurrentDevice() const override { return 0; }
  at::Device getDeviceFromPtr(void*) const override { return at::Device(kDev, 0); }
  bool isPinnedPtr(const void* p) const override { return PinnedAllocator::owns(p); }
  at::Allocator* getPinnedMemoryAllocator() const override { return &g_pinned_alloc; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex) const override {
    static at::Generator g = at::detail::getDefaultCPUGenerator();
    return g;
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resize_storage(storage, newsize);
  }
};

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype, std::optional<at::Layout>,
                               std::optional<at::Device>, std::optional<bool>,
                               std::optional<at::MemoryFormat> memory_format) {
  return at::detail::empty_generic(size, allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout>, std::optional<at::Device>, std::optional<bool>) {
  return at::detail::empty_strided_generic(size, stride, allocator(), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

// A CPU tensor over the same memory (the device's memory is host memory).
at::Tensor host_alias(const at::Tensor& t) {
  if (t.is_cpu()) return t;
  return at::from_blob(t.data_ptr(), t.sizes(), t.strides(), t.options().device(at::kCPU));
}

// The device's copy function: host->device, device->host and device->device.
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  if (g_fail_copies.load() > 0 && (!g_fail_h2d_only.load() || (self.is_cpu() && !dst.is_cpu()))) {
    if (g_skip_copies.load() > 0) {
      --g_skip_copies;
    } else if (g_fail_copies.fetch_sub(1) > 0) {
      throw std::runtime_error("uccltest: injected copy failure");
    }
  }
  const int64_t bytes = static_cast<int64_t>(self.numel() * self.element_size());
  if (!self.is_cpu() && dst.is_cpu()) {
    ++g_d2h_calls;
    g_d2h_bytes += bytes;
  } else if (self.is_cpu() && !dst.is_cpu()) {
    ++g_h2d_calls;
    g_h2d_bytes += bytes;
  } else {
    ++g_d2d_calls;
  }
  if (g_sim.load()) {
    sim_copy_tensor(self, dst, non_blocking);
  } else {
    host_alias(dst).copy_(host_alias(self));
  }
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::Tensor d = dst;
  if (d.sizes() != self.sizes()) d.resize_(self.sizes());
  return copy_from(self, d, false);
}

// Contiguous sizes; the storage grows (never shrinks) when they need more bytes, as on the CPU.
const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size, std::optional<at::MemoryFormat> fmt) {
  auto sizes = C10_AS_INTARRAYREF_SLOW(size);
  at::TensorImpl* impl = self.unsafeGetTensorImpl();
  const size_t need = at::detail::computeStorageNbytesContiguous(sizes, impl->dtype().itemsize(), impl->storage_offset());
  if (need > self.storage().nbytes()) resize_storage(self.storage(), need);
  impl->set_sizes_contiguous(sizes);
  return self;
}

at::Tensor as_strided(const at::Tensor& self, c10::IntArrayRef size, c10::IntArrayRef stride,
                      std::optional<int64_t> offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, offset);
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) { return at::native::view(self, size); }

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) { at::native::cpu_fallback(op, stack); }

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", empty_memory_format);
  m.impl("empty_strided", empty_strided);
  m.impl("_copy_from", copy_from);
  m.impl("_copy_from_and_resize", copy_from_and_resize);
  m.impl("resize_", resize_);
  m.impl("as_strided", as_strided);
  m.impl("view", view);
  // reshape() of a strided tensor where a view will do (the CPU fallback would hand back a copy,
  // and a write through it would be lost).
  m.impl("_reshape_alias", at::native::_reshape_alias);
  // Views must stay views (the CPU fallback would return copies): torch.distributed passes
  // complex tensors as view_as_real.
  m.impl("view_as_real", at::native::view_as_real);
  m.impl("view_as_complex", at::native::view_as_complex);
  // A tensor over a given storage (device-agnostic in ATen but for the name): how torch copies a
  // device's storage to the host (torch.save of device tensors; ZeroRedundancyOptimizer's
  // consolidate_state_dict pickles its shards so).
  m.impl("set_.source_Storage", at::native::set_);
  m.impl("set_.source_Storage_storage_offset", at::native::set_storage_cpu_);
  m.impl("set_.source_Tensor", at::native::set_tensor_);
  m.impl("record_stream", record_stream);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&cpu_fallback>()); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  static TestHooks hooks;
  at::RegisterPrivateUse1HooksInterface(&hooks);
  c10::SetAllocator(kDev, &g_alloc);
  m.def("use_uccl_sim_memory", [] {
    sim();  // fails here, clearly, where uccl has no simulated device
    g_sim = true;
    c10::SetAllocator(kDev, &g_sim_alloc);  // storages made without a tensor (torch.load's) too
  });
  m.def("new_stream", [] { return new_sim_stream(); });
  m.def("set_stream", [](uint64_t handle) { t_stream = static_cast<c10::StreamId>(handle); });
  m.def("current_stream", [] { return static_cast<uint64_t>(t_stream); });
  m.def("set_capturing", [](bool on) { g_capturing = on; });
  m.def("synchronize", [] {
    auto st = sim_current_stream();
    check_ok(sim()->synchronize(st.get()), "synchronize");
  });
  m.def("copy_stats", [] {
    return std::map<std::string, int64_t>{{"d2h_calls", g_d2h_calls.load()}, {"h2d_calls", g_h2d_calls.load()},
                                          {"d2d_calls", g_d2d_calls.load()}, {"d2h_bytes", g_d2h_bytes.load()},
                                          {"h2d_bytes", g_h2d_bytes.load()}};
  });
  m.def("reset_copy_stats", [] {
    g_d2h_calls = g_h2d_calls = g_d2d_calls = 0;
    g_d2h_bytes = g_h2d_bytes = 0;
  });
  m.def(
      "fail_next_copies",
      [](int64_t n, bool h2d_only, int64_t skip) {
        g_fail_h2d_only = h2d_only;
        g_skip_copies = skip;
        g_fail_copies = n;
      },
      pybind11::arg("n"), pybind11::arg("h2d_only") = false, pybind11::arg("skip") = 0);
}
