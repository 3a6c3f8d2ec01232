// The simulated device (see sim_device.h): settings, memory, copies and kernels. Its events,
// stream waits, signals and synchronization are sim_device_sync.cc.
#include "base/sim_device.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>

#include "base/huge_pages.h"
#include "base/reduce.h"
#include "base/sim_stream.h"

namespace uccl {

const DoubleSetting kSimCopyGbps("device", "UCCL_SIM_COPY_GBPS", "0",
                                 "simulated device: bandwidth of copies to/from its memory in GB/s (0: unthrottled)",
                                 number_at_least(0));
const DoubleSetting kSimCopyLatencyUs("device", "UCCL_SIM_COPY_LATENCY_US", "0",
                                      "simulated device: latency added to every copy to/from its memory (us)",
                                      number_at_least(0));
const IntSetting kSimDevices("device", "UCCL_SIM_DEVICES", "2", "simulated device: number of devices",
                             int_in(1, 64));
const BoolSetting kSimReduceFromHost("device", "UCCL_SIM_REDUCE_FROM_HOST", "1",
                                     "simulated device: its kernels read host memory (staged receives reduce straight "
                                     "out of their slots); 0 copies to the device first, as the cuda backend does by default",
                                     boolean());

const IntSetting kSimCopyEngines("device", "UCCL_SIM_COPY_ENGINES", "1",
                                  "simulated device: copy engines per device: 1 (one queue for every copy, the two "
                                  "directions serialize) or 2 (host->device and device->host overlap, as on a GPU)",
                                  int_in(1, 2));

SimBackend::SimBackend(SimOptions opt)
    : name_(std::move(opt.name)),
      devices_(opt.devices),
      gbps_(opt.copy_gbps),
      latency_us_(opt.copy_latency_us),
      reduces_from_host_(opt.reduces_from_host),
      copy_engines_(opt.copy_engines),
      staging_chunk_bytes_(opt.staging_chunk_bytes),
      mem_(SignalSafeMemory::Ops{
          [this](int o, size_t n) {
            device_sync();
            return raw_alloc(o, n);
          },
          [this](void* p) {
            device_sync();
            raw_free(p);
          },
          [this](size_t n) -> Result<void*> {
            device_sync();
            void* p = nullptr;
            if (posix_memalign(&p, 4096, n ? n : 1) != 0) return SystemError(name_ + ": pinned alloc", ENOMEM);
            std::lock_guard<std::mutex> lock(mu_);
            pinned_[reinterpret_cast<uintptr_t>(p)] = n ? n : 1;
            return p;
          },
          [this](void* p) {
            device_sync();
            {
              std::lock_guard<std::mutex> lock(mu_);
              pinned_.erase(reinterpret_cast<uintptr_t>(p));
            }
            std::free(p);
          },
          [this](int o, size_t n) { return raw_alloc(o, n); },  // cudaMallocAsync's model
          [this](void* p) { raw_free(p); },
          [this] { return waits_outstanding_.load() > 0; }}) {}

// CUDA's implicit synchronization: waits until every stream of this backend ran dry.
void SimBackend::device_sync() {
  std::lock_guard<std::mutex> lock(live_sim_streams_mu());
  for (const void* h : live_sim_streams()) {
    auto* st = static_cast<SimStream*>(const_cast<void*>(h));
    if (st->owner() == this) (void)st->synchronize();
  }
}

SimBackend::~SimBackend() {
  for (auto& [dev, a] : allocs_) {
    munmap(reinterpret_cast<void*>(dev), a.mapped);
    unmap_pages(a.rw, a.mapped);
  }
}

void SimBackend::set_copy_speed(double gbps, double latency_us) {
  std::lock_guard<std::mutex> lock(mu_);
  gbps_ = gbps;
  latency_us_ = latency_us;
}
double SimBackend::copy_gbps() const {
  std::lock_guard<std::mutex> lock(mu_);
  return gbps_;
}
double SimBackend::copy_latency_us() const {
  std::lock_guard<std::mutex> lock(mu_);
  return latency_us_;
}
size_t SimBackend::allocated_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocated_;
}

bool SimBackend::available(std::string*) const { return true; }

bool SimBackend::owns(const void* ptr, int* ordinal) const {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocs_.upper_bound(p);
  if (it == allocs_.begin()) return false;
  --it;
  if (p >= it->first + it->second.bytes) return false;
  if (ordinal) *ordinal = it->second.ordinal;
  return true;
}

char* SimBackend::host_view(const void* ptr, size_t bytes) const {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocs_.upper_bound(p);
  if (it == allocs_.begin()) return nullptr;
  --it;
  if (p >= it->first + it->second.bytes || p + bytes > it->first + it->second.bytes) return nullptr;
  return it->second.rw + (p - it->first);
}

Result<void*> SimBackend::alloc(int ordinal, size_t bytes) { return mem_.alloc(ordinal, bytes); }
void SimBackend::free(void* ptr) { mem_.free(ptr); }
Result<void*> SimBackend::alloc_pinned(size_t bytes) { return mem_.alloc_pinned(bytes); }
void SimBackend::free_pinned(void* ptr) { mem_.free_pinned(ptr); }

Result<void*> SimBackend::raw_alloc(int ordinal, size_t bytes) {
  if (ordinal < 0 || ordinal >= devices_)
    return InvalidArgument(name_ + ": no device " + std::to_string(ordinal) + " (" + std::to_string(devices_) + " devices)");
  if (bytes == 0) return InvalidArgument(name_ + ": alloc of 0 bytes");
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t mapped = (bytes + page - 1) / page * page;
  // The address handed out: a PROT_NONE reservation, no memory behind it (sim_device.h).
  void* dev = mmap(nullptr, mapped, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (dev == MAP_FAILED) return SystemError(name_ + ": mmap of a device address range", errno);
  char* rw = map_pages(mapped);  // the workers' memory: huge pages where offered (huge_pages.h)
  if (!rw) {
    const int e = errno;
    munmap(dev, mapped);
    return SystemError(name_ + ": mmap of device memory", e);
  }
  std::lock_guard<std::mutex> lock(mu_);
  allocs_[reinterpret_cast<uintptr_t>(dev)] = Alloc{bytes, mapped, rw, ordinal};
  allocated_ += bytes;
  ++live_allocs_;
  return dev;
}

void SimBackend::raw_free(void* ptr) {
  if (!ptr) return;
  Alloc a{};
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = allocs_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == allocs_.end()) return;
    a = it->second;
    allocated_ -= a.bytes;
    --live_allocs_;
    allocs_.erase(it);
  }
  munmap(ptr, a.mapped);
  unmap_pages(a.rw, a.mapped);
}


Result<std::unique_ptr<DeviceStream>> SimBackend::create_stream(int ordinal) {
  if (ordinal < 0 || ordinal >= devices_) return InvalidArgument(name_ + ": no device " + std::to_string(ordinal));
  return std::unique_ptr<DeviceStream>(std::make_unique<SimStream>(this, ordinal));
}

namespace {
std::mutex g_default_mu;
// wrap_stream(ordinal, 0): one default stream per backend and device, made on first use and
// kept for the life of the process (like a device's legacy stream).
auto* g_default_streams = new std::map<std::pair<const SimBackend*, int>, std::unique_ptr<SimStream>>();

// Runs body, which moves `bytes` over the simulated bus, taking at least what the bus allows:
// latency_us plus bytes at gbps (0: unthrottled; then the clock is not even read).
template <class F>
void over_the_bus(size_t bytes, double gbps, double latency_us, F&& body) {
  const double us = latency_us + (gbps > 0 ? static_cast<double>(bytes) / (gbps * 1e3) : 0.0);
  if (us <= 0) return body();
  const auto start = std::chrono::steady_clock::now();
  body();
  std::this_thread::sleep_until(start + std::chrono::nanoseconds(static_cast<int64_t>(us * 1e3)));
}

// Tasks that do work skip themselves on a broken stream.
template <class F>
std::function<Status(const Status&)> work(F f) {
  return [f = std::move(f)](const Status& sticky) -> Status {
    if (!sticky.ok()) return Status::Ok();
    return f();
  };
}
}  // namespace

Result<std::unique_ptr<DeviceStream>> SimBackend::wrap_stream(int ordinal, uintptr_t handle) {
  if (ordinal < 0 || ordinal >= devices_) return InvalidArgument(name_ + ": no device " + std::to_string(ordinal));
  if (handle == 0) {
    std::lock_guard<std::mutex> lock(g_default_mu);
    auto& s = (*g_default_streams)[{this, ordinal}];
    if (!s) s = std::make_unique<SimStream>(this, ordinal);
    return std::unique_ptr<DeviceStream>(std::make_unique<SimStreamRef>(s.get()));
  }
  std::lock_guard<std::mutex> lock(live_sim_streams_mu());
  if (!live_sim_streams().count(reinterpret_cast<const void*>(handle)))
    return InvalidArgument(name_ + ": stream handle " + std::to_string(handle) + " is not a live simulated stream");
  auto* target = reinterpret_cast<SimStream*>(handle);
  if (target->ordinal() != ordinal)
    return InvalidArgument(name_ + ": stream of device " + std::to_string(target->ordinal()) + " used for device " +
                           std::to_string(ordinal));
  return std::unique_ptr<DeviceStream>(std::make_unique<SimStreamRef>(target));
}

Status SimBackend::resolve(const void* ptr, size_t bytes, bool want_device, char** out) const {
  int ord = -1;
  if (!owns(ptr, &ord)) {
    if (want_device) return InvalidArgument(name_ + ": pointer is not " + name_ + " device memory");
    *out = const_cast<char*>(static_cast<const char*>(ptr));
    return Status::Ok();
  }
  char* v = host_view(ptr, bytes);
  if (!v) return InvalidArgument(name_ + ": " + std::to_string(bytes) + " bytes run past the end of a device allocation");
  *out = v;
  return Status::Ok();
}

Status SimBackend::resolve_copy(void* dst, const void* src, size_t bytes, CopyDir dir, char** d, char** sr,
                                double* gbps, double* lat) const {
  const bool dst_dev = dir == CopyDir::kHostToDevice || dir == CopyDir::kDeviceToDevice;
  const bool src_dev = dir == CopyDir::kDeviceToHost || dir == CopyDir::kDeviceToDevice;
  UCCL_RETURN_IF_ERROR(resolve(dst, bytes, dst_dev, d));
  UCCL_RETURN_IF_ERROR(resolve(src, bytes, src_dev, sr));
  if ((!dst_dev && *d != dst) || (!src_dev && *sr != src))
    return InvalidArgument(name_ + ": copy direction says host memory but the pointer is device memory");
  *gbps = dst_dev || src_dev ? copy_gbps() : 0;
  *lat = dst_dev || src_dev ? copy_latency_us() : 0;
  return Status::Ok();
}

const void* SimBackend::kernel_view_of_host(const void* host, int) const {
  const auto a = reinterpret_cast<uintptr_t>(host);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = pinned_.upper_bound(a);
  if (it == pinned_.begin()) return nullptr;
  --it;
  return a < it->first + it->second ? host : nullptr;
}

bool SimBackend::register_host(void* ptr, size_t bytes) {
  if (!ptr || bytes == 0) return false;
  return mem_.run_if_quiet([&] {
    std::lock_guard<std::mutex> lock(mu_);
    pinned_[reinterpret_cast<uintptr_t>(ptr)] = bytes;
  });
}

void SimBackend::unregister_host(void* ptr, std::function<void()> then) {
  mem_.run_when_quiet([this, ptr, then = std::move(then)] {
    {
      std::lock_guard<std::mutex> lock(mu_);
      pinned_.erase(reinterpret_cast<uintptr_t>(ptr));
    }
    then();
  });
}

std::shared_ptr<SimBackend::EngineTurns> SimBackend::engine(int ordinal, CopyDir dir) {
  const int which = copy_engines_ > 1 && dir == CopyDir::kHostToDevice ? 1 : 0;
  std::lock_guard<std::mutex> lock(mu_);
  auto& e = engines_[{ordinal, which}];
  if (!e) e = std::make_shared<EngineTurns>();
  return e;
}

Status SimBackend::copy_async(void* dst, const void* src, size_t bytes, CopyDir dir, DeviceStream* s) {
  return queue_copy(dst, src, bytes, dir, s, true);
}

Status SimBackend::copy_by_kernel_async(void* dst, const void* src, size_t bytes, CopyDir dir, DeviceStream* s) {
  return queue_copy(dst, src, bytes, dir, s, false);
}

Status SimBackend::queue_copy(void* dst, const void* src, size_t bytes, CopyDir dir, DeviceStream* s, bool by_engine) {
  SimStream* st = sim_stream_of(s);
  if (!st) return InvalidArgument(name_ + ": not a simulated stream");
  if (bytes == 0) return Status::Ok();
  char *d = nullptr, *sr = nullptr;
  double gbps = 0, lat = 0;
  UCCL_RETURN_IF_ERROR(resolve_copy(dst, src, bytes, dir, &d, &sr, &gbps, &lat));
  // a device-to-device copy may overlap (memmove semantics)
  auto copy = [d, sr, bytes, gbps, lat] { over_the_bus(bytes, gbps, lat, [&] { std::memmove(d, sr, bytes); }); };
  // A kernel reaches host memory only where it is pinned (as cuda's copy_by_kernel_async).
  const int ord = st->ordinal();
  if (!by_engine && ((d == dst && !kernel_view_of_host(dst, ord)) || (sr == src && !kernel_view_of_host(src, ord))))
    by_engine = true;
  if (!by_engine) {
    st->enqueue(work([copy]() {
      copy();
      return Status::Ok();
    }));
    return Status::Ok();
  }
  // Through the engine: the copy's turn is taken now, its stream's task waits for that turn once
  // the work queued before it there is done, copies, and passes the turn on. Turn and task are
  // taken under one lock, so on every stream the turns stand in queue order (two threads' copies
  // onto one stream could otherwise each wait for the other's turn).
  std::shared_ptr<EngineTurns> eng = engine(ord, dir);  // held by the task: a stream may outlive its backend
  std::lock_guard<std::mutex> order(engine_order_mu_);
  const uint64_t turn = eng->next++;
  st->enqueue([eng, turn, copy](const Status& sticky) {
    std::unique_lock<std::mutex> lock(eng->mu);
    eng->cv.wait(lock, [&] { return eng->serving == turn; });  // the copies queued before it, of any stream
    lock.unlock();
    if (sticky.ok()) copy();  // a broken stream's copy does not run (as its kernels do not), but takes its turn
    lock.lock();
    ++eng->serving;
    eng->cv.notify_all();
    return Status::Ok();
  });
  return Status::Ok();
}

// The kernels' common part: the stream checked, every operand resolved to the worker's mapping,
// then fn(operands) queued on the stream; nothing is queued for zero elements.
Status SimBackend::enqueue_kernel(DeviceStream* s, size_t bytes, std::initializer_list<const void*> operands,
                                  std::function<void(char* const*)> fn) {
  SimStream* st = sim_stream_of(s);
  if (!st) return InvalidArgument(name_ + ": not a simulated stream");
  if (bytes == 0) return Status::Ok();
  std::array<char*, 3> p{};
  size_t i = 0, host_operands = 0;
  for (const void* q : operands) {
    UCCL_RETURN_IF_ERROR(resolve(q, bytes, false, &p[i]));
    host_operands += p[i++] == q;  // not remapped: host memory, read over the "bus"
  }
  // Host operands (kernel_view_of_host) cost what a copy of their bytes would.
  const double gbps = host_operands ? copy_gbps() : 0, lat = host_operands ? copy_latency_us() : 0;
  const size_t bus_bytes = host_operands * bytes;
  st->enqueue(work([p, fn = std::move(fn), gbps, lat, bus_bytes]() {
    over_the_bus(bus_bytes, gbps, lat, [&] { fn(p.data()); });
    return Status::Ok();
  }));
  return Status::Ok();
}

Status SimBackend::reduce_async(void* dst, const void* a, const void* b, size_t count, DataType dt, RedOp op,
                                DeviceStream* s) {
  return enqueue_kernel(s, count * dtype_size(dt), {dst, a, b},
                        [=](char* const* p) { reduce(p[0], p[1], p[2], count, dt, op); });
}

Status SimBackend::scale_async(void* dst, const void* src, size_t count, DataType dt, double factor,
                               DeviceStream* s) {
  return enqueue_kernel(s, count * dtype_size(dt), {dst, src},
                        [=](char* const* p) { scale(p[0], p[1], count, dt, factor); });
}

Status SimBackend::divide_async(void* dst, const void* src, size_t count, DataType dt, int n, DeviceStream* s) {
  return enqueue_kernel(s, count * dtype_size(dt), {dst, src},
                        [=](char* const* p) { divide(p[0], p[1], count, dt, n); });
}

SimBackend* sim_backend() {
  static SimBackend* b = [] {
    SimOptions o;
    o.devices = kSimDevices.get();
    o.copy_gbps = kSimCopyGbps.get();
    o.copy_latency_us = kSimCopyLatencyUs.get();
    o.reduces_from_host = kSimReduceFromHost.get();
    o.copy_engines = kSimCopyEngines.get();
    return new SimBackend(o);  // process lifetime: streams of any thread may still use it at exit
  }();
  return b;
}

namespace {
// Registered as a proxy so that the settings are read at first use, not in a static initializer.
class SimProxy final : public DeviceBackend {
 public:
  const char* name() const override { return "sim"; }
  MemoryKind kind() const override { return MemoryKind::kSim; }
  bool available(std::string* why) const override { return sim_backend()->available(why); }
  int device_count() const override { return sim_backend()->device_count(); }
  bool owns(const void* p, int* o) const override { return sim_backend()->owns(p, o); }
  bool may_own_memory() const override { return sim_backend()->may_own_memory(); }
  Result<void*> alloc(int o, size_t n) override { return sim_backend()->alloc(o, n); }
  void free(void* p) override { sim_backend()->free(p); }
  Result<void*> alloc_pinned(size_t n) override { return sim_backend()->alloc_pinned(n); }
  void free_pinned(void* p) override { sim_backend()->free_pinned(p); }
  bool pinned_scarce() override { return sim_backend()->pinned_scarce(); }
  Result<std::unique_ptr<DeviceStream>> create_stream(int o) override { return sim_backend()->create_stream(o); }
  Result<std::unique_ptr<DeviceStream>> wrap_stream(int o, uintptr_t h) override { return sim_backend()->wrap_stream(o, h); }
  Status copy_async(void* d, const void* s, size_t n, CopyDir dir, DeviceStream* st) override {
    return sim_backend()->copy_async(d, s, n, dir, st);
  }
  Status copy_by_kernel_async(void* d, const void* s, size_t n, CopyDir dir, DeviceStream* st) override {
    return sim_backend()->copy_by_kernel_async(d, s, n, dir, st);
  }
  Status reduce_async(void* d, const void* a, const void* b, size_t c, DataType dt, RedOp op, DeviceStream* s) override {
    return sim_backend()->reduce_async(d, a, b, c, dt, op, s);
  }
  const void* kernel_view_of_host(const void* host, int ordinal) const override {
    return sim_backend()->kernel_view_of_host(host, ordinal);
  }
  bool reduces_from_host() const override { return sim_backend()->reduces_from_host(); }
  bool register_host(void* ptr, size_t bytes) override { return sim_backend()->register_host(ptr, bytes); }
  void unregister_host(void* ptr, std::function<void()> then) override {
    sim_backend()->unregister_host(ptr, std::move(then));
  }
  Status scale_async(void* d, const void* s, size_t c, DataType dt, double f, DeviceStream* st) override {
    return sim_backend()->scale_async(d, s, c, dt, f, st);
  }
  Status divide_async(void* d, const void* s, size_t c, DataType dt, int n, DeviceStream* st) override {
    return sim_backend()->divide_async(d, s, c, dt, n, st);
  }
  Result<std::unique_ptr<DeviceEvent>> create_event() override { return sim_backend()->create_event(); }
  Status record(DeviceEvent* e, DeviceStream* s) override { return sim_backend()->record(e, s); }
  Result<bool> query(DeviceEvent* e) override { return sim_backend()->query(e); }
  Status stream_wait(DeviceStream* s, DeviceEvent* e) override { return sim_backend()->stream_wait(s, e); }
  Result<std::shared_ptr<DeviceSignal>> create_signal(int o) override { return sim_backend()->create_signal(o); }
  Status stream_wait_signal(DeviceStream* s, const std::shared_ptr<DeviceSignal>& sig, StreamWaitMode how) override {
    return sim_backend()->stream_wait_signal(s, sig, how);
  }
  Result<bool> capturing(DeviceStream* s) override { return sim_backend()->capturing(s); }
  Status synchronize(DeviceStream* s) override { return sim_backend()->synchronize(s); }
};
SimProxy g_sim_proxy;
[[maybe_unused]] const bool g_sim_registered = register_device_backend(&g_sim_proxy);
}  // namespace

}  // namespace uccl
