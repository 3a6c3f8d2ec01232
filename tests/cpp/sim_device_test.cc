// The simulated device backend: memory reachable only through its copy API (a host
// dereference of a device pointer crashes), in-order streams, events, stream_wait, kernels
// bitwise equal to the host ones, throttled copies, the registry and typed errors.
#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "test_util.h"
#include "base/device.h"
#include "base/reduce.h"
#include "base/sim_device.h"

using namespace uccl;

namespace {
bool wait_event(DeviceBackend* b, DeviceEvent* e) {
  for (int i = 0; i < 200000; ++i) {
    Result<bool> r = b->query(e);
    if (!r.ok()) return false;
    if (r.value()) return true;
    usleep(50);
  }
  return false;
}
}  // namespace

TEST_CASE("the sim backend is registered and locate_memory finds its pointers") {
  DeviceBackend* b = find_device_backend("sim");
  REQUIRE(b != nullptr);
  std::string why;
  CHECK(b->available(&why));
  CHECK(b->kind() == MemoryKind::kSim);
  Result<void*> p = b->alloc(1, 1000);
  REQUIRE(p.ok());
  MemoryLoc loc = locate_memory(static_cast<char*>(p.value()) + 999);
  CHECK(loc.is_device());
  CHECK(loc.backend == b);
  CHECK(loc.ordinal == 1);
  CHECK_FALSE(locate_memory(static_cast<char*>(p.value()) + 1000).is_device());
  int host = 0;
  CHECK_FALSE(locate_memory(&host).is_device());
  b->free(p.value());
  CHECK_FALSE(locate_memory(p.value()).is_device());
  bool listed = false;
  for (const DeviceBackendInfo& i : device_backend_infos()) listed |= i.name == "sim" && i.available && i.devices >= 1;
  CHECK(listed);
}

TEST_CASE("device memory is not reachable from host code, small or large; the workers' memory is") {
  // 4 KiB and 6 MiB + 1: the large one's workers' memory is 2 MiB-aligned (huge pages where the
  // kernel gives them), a separate mapping from the address handed out.
  for (size_t bytes : {size_t{4096}, (size_t{6} << 20) + 1}) {
    CAPTURE(bytes);
    Result<void*> p = sim_backend()->alloc(0, bytes);
    REQUIRE(p.ok());
    char* rw = sim_backend()->host_view(p.value(), bytes);
    REQUIRE(rw != nullptr);
    CHECK(rw != p.value());
    if (bytes > (size_t{2} << 20)) CHECK(reinterpret_cast<uintptr_t>(rw) % (size_t{2} << 20) == 0);
    // The kernel sees the same: a write() from the workers' memory works, from the handed-out
    // address it fails with EFAULT (no page is readable there).
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    rw[bytes - 1] = 7;
    CHECK(write(fds[1], rw + bytes - 1, 1) == 1);
    errno = 0;
    CHECK(write(fds[1], static_cast<char*>(p.value()) + bytes - 1, 1) == -1);
    CHECK(errno == EFAULT);
    close(fds[0]);
    close(fds[1]);
    pid_t pid = fork();
    if (pid == 0) {
      signal(SIGSEGV, SIG_DFL);  // not doctest's handler: the child must simply die
      volatile char c = *static_cast<volatile char*>(p.value());  // must fault
      (void)c;
      _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFSIGNALED(st));
    CHECK(WTERMSIG(st) == SIGSEGV);
    sim_backend()->free(p.value());
  }
}

TEST_CASE("copies and kernels run in order on a stream and match the host kernels bit for bit") {
  SimBackend* b = sim_backend();
  auto s = b->create_stream(0);
  REQUIRE(s.ok());
  auto ev = b->create_event();
  REQUIRE(ev.ok());
  std::mt19937 rng(7);
  for (int dti = 0; dti < kNumDataTypes; ++dti) {
    const DataType dt = static_cast<DataType>(dti);
    for (int opi = 0; opi < kNumRedOps; ++opi) {
      const RedOp op = static_cast<RedOp>(opi);
      if (redop_is_bitwise(op) && !dtype_is_integer(dt)) continue;
      const size_t count = 1027, n = count * dtype_size(dt);
      std::vector<unsigned char> a(n), c(n), out(n), want(n);
      for (auto& x : a) x = static_cast<unsigned char>(rng());
      for (auto& x : c) x = static_cast<unsigned char>(rng());
      void* da = b->alloc(0, n).take();
      void* dc = b->alloc(0, n).take();
      REQUIRE(b->copy_async(da, a.data(), n, CopyDir::kHostToDevice, s.value().get()).ok());
      REQUIRE(b->copy_async(dc, c.data(), n, CopyDir::kHostToDevice, s.value().get()).ok());
      REQUIRE(b->reduce_async(da, da, dc, count, dt, op, s.value().get()).ok());
      REQUIRE(b->scale_async(da, da, count, dt, 0.5, s.value().get()).ok());
      if (dtype_is_integer(dt)) REQUIRE(b->divide_async(da, da, count, dt, 3, s.value().get()).ok());
      REQUIRE(b->copy_async(out.data(), da, n, CopyDir::kDeviceToHost, s.value().get()).ok());
      REQUIRE(b->record(ev.value().get(), s.value().get()).ok());
      reduce(want.data(), a.data(), c.data(), count, dt, op);
      scale(want.data(), want.data(), count, dt, 0.5);
      if (dtype_is_integer(dt)) divide(want.data(), want.data(), count, dt, 3);
      REQUIRE(wait_event(b, ev.value().get()));
      CHECK(std::memcmp(out.data(), want.data(), n) == 0);
      b->free(da);
      b->free(dc);
    }
  }
}

TEST_CASE("stream_wait orders two streams; wrap_stream finds a live stream by handle") {
  SimBackend* b = sim_backend();
  auto s1 = b->create_stream(0).take();
  auto s2 = b->create_stream(0).take();
  auto e = b->create_event().take();
  std::vector<char> src(1 << 20, 'x'), dst(1 << 20, 0);
  void* d = b->alloc(0, src.size()).take();
  b->set_copy_speed(1.0, 0);  // 1 MiB at 1 GB/s: ~1 ms
  REQUIRE(b->copy_async(d, src.data(), src.size(), CopyDir::kHostToDevice, s1.get()).ok());
  REQUIRE(b->record(e.get(), s1.get()).ok());
  auto wrapped = b->wrap_stream(0, s2->handle());
  REQUIRE(wrapped.ok());
  CHECK(wrapped.value()->external());
  REQUIRE(b->stream_wait(wrapped.value().get(), e.get()).ok());
  REQUIRE(b->copy_async(dst.data(), d, dst.size(), CopyDir::kDeviceToHost, wrapped.value().get()).ok());
  REQUIRE(b->synchronize(s2.get()).ok());
  b->set_copy_speed(0, 0);
  CHECK(dst == src);
  CHECK_FALSE(b->wrap_stream(0, 12345).ok());
  CHECK(b->wrap_stream(0, 0).ok());  // the default stream
  b->free(d);
}

namespace {
// The state of device.h's hazard: 4096 bytes of 'h' in new device memory *d, then on `user` a
// wait on the returned signal with a device->host copy of *d into *back queued behind it.
std::shared_ptr<DeviceSignal> hold_a_copy(SimBackend& b, DeviceStream* user, void** d, std::vector<char>* back) {
  std::vector<char> host(back->size(), 'h');
  *d = b.alloc(0, host.size()).take();
  REQUIRE(b.copy_async(*d, host.data(), host.size(), CopyDir::kHostToDevice, user).ok());
  REQUIRE(b.synchronize(user).ok());
  auto sig = b.create_signal(0).take();
  REQUIRE(b.stream_wait_signal(user, sig, StreamWaitMode::kSignal).ok());
  REQUIRE(b.copy_async(back->data(), *d, back->size(), CopyDir::kDeviceToHost, user).ok());  // behind the wait
  return sig;
}
}  // namespace

TEST_CASE("the copy engine is shared: a copy behind a waiting stream holds later copies, kernels do not wait") {
  // The model of device.h's hazard (copy_async vs copy_by_kernel_async): stream `user` waits on a
  // signal and has a copy queued behind the wait; an engine copy on another stream then waits for
  // it (head of the engine's queue), a copy by kernel on a third stream does not (into pinned
  // memory: a kernel reaches no other host memory, and such a copy goes by the engine too).
  SimOptions o;
  o.name = "sim-engine";
  o.devices = 1;
  SimBackend b(o);
  auto user = b.create_stream(0).take();
  auto other = b.create_stream(0).take();
  auto third = b.create_stream(0).take();
  std::vector<char> back(4096, 0), out1(4096, 0);
  char* out2 = static_cast<char*>(b.alloc_pinned(4096).take());
  std::memset(out2, 0, 4096);
  void* d = nullptr;
  auto sig = hold_a_copy(b, user.get(), &d, &back);
  auto e_engine = b.create_event().take();
  auto e_kernel = b.create_event().take();
  REQUIRE(b.copy_async(out1.data(), d, out1.size(), CopyDir::kDeviceToHost, other.get()).ok());
  REQUIRE(b.record(e_engine.get(), other.get()).ok());
  REQUIRE(b.copy_by_kernel_async(out2, d, 4096, CopyDir::kDeviceToHost, third.get()).ok());
  REQUIRE(b.record(e_kernel.get(), third.get()).ok());
  REQUIRE(b.synchronize(third.get()).ok());  // the kernel's copy is not held
  CHECK(out2[0] == 'h');
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK_FALSE(b.query(e_engine.get()).value());  // held behind the user's copy
  CHECK(out1[0] == 0);
  sig->raise();
  REQUIRE(b.synchronize(other.get()).ok());
  REQUIRE(b.synchronize(user.get()).ok());
  CHECK(out1[0] == 'h');
  CHECK(back[0] == 'h');
  b.free(d);
  b.free_pinned(out2);
}

TEST_CASE("with an engine per direction, a copy to the device is not held behind a waiting copy to the host") {
  // UCCL_SIM_COPY_ENGINES=2 (SimOptions::copy_engines): as on a GPU, host->device and
  // device->host copies have engines of their own; the same direction still shares one.
  SimOptions o;
  o.name = "sim-engines";
  o.devices = 1;
  o.copy_engines = 2;
  SimBackend b(o);
  auto user = b.create_stream(0).take();
  auto same = b.create_stream(0).take();
  auto other = b.create_stream(0).take();
  std::vector<char> back(4096, 0), out(4096, 0), in(4096, 'i');
  void* d = nullptr;
  void* d2 = b.alloc(0, in.size()).take();
  auto sig = hold_a_copy(b, user.get(), &d, &back);
  auto e_same = b.create_event().take();
  REQUIRE(b.copy_async(out.data(), d, out.size(), CopyDir::kDeviceToHost, same.get()).ok());
  REQUIRE(b.record(e_same.get(), same.get()).ok());
  REQUIRE(b.copy_async(d2, in.data(), in.size(), CopyDir::kHostToDevice, other.get()).ok());
  REQUIRE(b.synchronize(other.get()).ok());  // the other direction's engine is free
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_FALSE(b.query(e_same.get()).value());  // the same direction's is held
  sig->raise();
  REQUIRE(b.synchronize(same.get()).ok());
  REQUIRE(b.synchronize(user.get()).ok());
  std::vector<char> check(4096, 0);
  REQUIRE(b.copy_async(check.data(), d2, check.size(), CopyDir::kDeviceToHost, other.get()).ok());
  REQUIRE(b.synchronize(other.get()).ok());
  CHECK(check[0] == 'i');
  CHECK(out[0] == 'h');
  CHECK(back[0] == 'h');
  b.free(d);
  b.free(d2);
}

TEST_CASE("a stream rings its completion bell after each task: a sleeper wakes when the copy is done") {
  SimOptions o;
  o.name = "sim-bell";
  o.devices = 1;
  o.copy_latency_us = 50000;  // 50 ms per copy: the sleeper is asleep when it ends
  SimBackend b(o);
  auto s = b.create_stream(0).take();
  FutexBell* bell = s->completion_bell();
  REQUIRE(bell != nullptr);
  std::vector<char> h(4096, 'x');
  void* d = b.alloc(0, h.size()).take();
  // Nobody sleeps: the worker rings without bumping the word (one load).
  const uint32_t before = bell->seq.load();
  REQUIRE(b.copy_async(d, h.data(), h.size(), CopyDir::kHostToDevice, s.get()).ok());
  REQUIRE(b.synchronize(s.get()).ok());
  CHECK(bell->seq.load() == before);
  auto e = b.create_event().take();
  REQUIRE(b.copy_async(d, h.data(), h.size(), CopyDir::kHostToDevice, s.get()).ok());
  REQUIRE(b.record(e.get(), s.get()).ok());
  const auto t0 = std::chrono::steady_clock::now();
  bool done = false;
  while (!done && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10)) {
    const uint32_t v = bell->arm();
    done = b.query(e.get()).value();  // the look after arming
    if (!done) {
      timespec ts{5, 0};  // the copy ends in 50 ms: a wake-up, not this timeout, ends the sleep
      syscall(SYS_futex, bell->word(), FUTEX_WAIT, v, &ts, nullptr, 0);
      done = b.query(e.get()).value();
    }
    bell->disarm();
  }
  const double s_waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(done);
  CHECK(s_waited < 4.0);
  CHECK(bell->seq.load() != before);  // it was rung for the sleeper
  b.free(d);
}

TEST_CASE("copy bandwidth and latency are applied, per instance") {
  SimOptions o;
  o.name = "sim-slow";
  o.copy_gbps = 0.5;
  o.copy_latency_us = 200;
  SimBackend slow(o);
  auto s = slow.create_stream(0).take();
  std::vector<char> h(4 << 20);
  void* d = slow.alloc(0, h.size()).take();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 4; ++i) REQUIRE(slow.copy_async(d, h.data(), h.size(), CopyDir::kHostToDevice, s.get()).ok());
  REQUIRE(slow.synchronize(s.get()).ok());
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // 16 MiB at 0.5 GB/s = 33.6 ms + 4 x 0.2 ms.
  CHECK(ms >= 33.0);
  CHECK(ms < 400.0);
  CHECK(slow.allocated_bytes() == h.size());
  slow.free(d);
  CHECK(slow.allocated_bytes() == 0);
}

TEST_CASE("a kernel reaches pinned and registered host memory only; registering waits for a quiet device") {
  SimOptions o;
  o.name = "sim-reach";
  o.devices = 1;
  SimBackend b(o);
  std::vector<char> pageable(8192);
  CHECK(b.kernel_view_of_host(pageable.data(), 0) == nullptr);
  char* pinned = static_cast<char*>(b.alloc_pinned(4096).take());
  CHECK(b.kernel_view_of_host(pinned + 100, 0) == pinned + 100);
  CHECK(b.kernel_view_of_host(pinned + 4096, 0) == nullptr);  // one past the end
  REQUIRE(b.register_host(pageable.data(), 4096));
  CHECK(b.kernel_view_of_host(pageable.data() + 10, 0) == pageable.data() + 10);
  CHECK(b.kernel_view_of_host(pageable.data() + 4096, 0) == nullptr);
  bool unmapped = false;
  b.unregister_host(pageable.data(), [&] { unmapped = true; });
  CHECK(unmapped);
  CHECK(b.kernel_view_of_host(pageable.data(), 0) == nullptr);
  // While a stream waits on a signal, registering is refused (cuda's cudaHostRegister may
  // synchronize): the range stays pageable, and a copy by kernel from it goes by the engine.
  auto s = b.create_stream(0).take();
  auto sig = b.create_signal(0).take();
  REQUIRE(b.stream_wait_signal(s.get(), sig, StreamWaitMode::kSignal).ok());
  CHECK_FALSE(b.register_host(pageable.data(), 4096));
  CHECK(b.kernel_view_of_host(pageable.data(), 0) == nullptr);
  sig->raise();
  REQUIRE(b.synchronize(s.get()).ok());
  CHECK(b.register_host(pageable.data(), 4096));
  b.unregister_host(pageable.data(), [] {});
  b.free_pinned(pinned);
  CHECK(b.kernel_view_of_host(pinned, 0) == nullptr);
}

TEST_CASE("a kernel reads host memory for its last operand, bit for bit, charged at the copy speed") {
  SimOptions o;
  o.name = "sim-bus";
  o.copy_gbps = 0.5;
  SimBackend b(o);
  CHECK(b.reduces_from_host());
  auto s = b.create_stream(0).take();
  const size_t count = 1 << 20, n = count * sizeof(float);  // 4 MiB: 8.4 ms at 0.5 GB/s
  std::vector<float> a(count), h(count), out(count);
  for (size_t i = 0; i < count; ++i) {
    a[i] = static_cast<float>(i % 977) * 0.25f;
    h[i] = static_cast<float>(i % 131) - 7.5f;
  }
  void* d = b.alloc(0, n).take();
  REQUIRE(b.copy_async(d, a.data(), n, CopyDir::kHostToDevice, s.get()).ok());
  REQUIRE(b.synchronize(s.get()).ok());
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE(b.reduce_async(d, d, h.data(), count, DataType::kFloat32, RedOp::kSum, s.get()).ok());
  REQUIRE(b.synchronize(s.get()).ok());
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  CHECK(ms >= 8.0);  // the host bytes went over the simulated bus, not for free
  b.set_copy_speed(0, 0);
  REQUIRE(b.copy_async(out.data(), d, n, CopyDir::kDeviceToHost, s.get()).ok());
  REQUIRE(b.synchronize(s.get()).ok());
  std::vector<float> want(count);
  reduce(want.data(), a.data(), h.data(), count, DataType::kFloat32, RedOp::kSum);
  CHECK(std::memcmp(out.data(), want.data(), n) == 0);
  b.free(d);
}

TEST_CASE("bad input is refused with InvalidArgument, a failure is reported by query") {
  SimBackend* b = sim_backend();
  auto s = b->create_stream(0).take();
  char host[64];
  CHECK(b->alloc(99, 10).status().code() == Code::kInvalidArgument);
  CHECK(b->alloc(0, 0).status().code() == Code::kInvalidArgument);
  void* d = b->alloc(0, 64).take();
  CHECK(b->copy_async(d, host, 128, CopyDir::kHostToDevice, s.get()).code() == Code::kInvalidArgument);
  CHECK(b->copy_async(host, host, 8, CopyDir::kDeviceToHost, s.get()).code() == Code::kInvalidArgument);
  CHECK(b->copy_async(d, d, 8, CopyDir::kHostToDevice, s.get()).code() == Code::kInvalidArgument);
  b->free(d);
  auto e = b->create_event().take();
  CHECK(b->query(e.get()).value());  // never recorded: complete
}
