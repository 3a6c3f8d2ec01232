// SignalSafeMemory (base/signal_safe_memory.h): device-synchronizing memory calls run only
// while no signal wait is outstanding; meanwhile requests are served without them and frees
// wait. And the simulated device, which models CUDA's implicit synchronization behind it:
// allocating while a stream waits on a signal must not wait for that stream.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <thread>
#include <vector>

#include "test_util.h"
#include "base/signal_safe_memory.h"
#include "base/sim_device.h"

using namespace uccl;

namespace {
// Ops that count their calls; device memory is plain host memory here.
struct FakeOps {
  std::atomic<int> alloc_sync{0}, free_sync{0}, pinned_sync{0}, free_pinned_sync{0}, alloc_unsync{0},
      free_unsync{0};
  std::atomic<bool> outstanding{false};
  SignalSafeMemory::Ops ops() {
    return SignalSafeMemory::Ops{
        [this](int, size_t n) -> Result<void*> {
          ++alloc_sync;
          return std::malloc(n);
        },
        [this](void* p) {
          ++free_sync;
          std::free(p);
        },
        [this](size_t n) -> Result<void*> {
          ++pinned_sync;
          return std::malloc(n);
        },
        [this](void* p) {
          ++free_pinned_sync;
          std::free(p);
        },
        [this](int, size_t n) -> Result<void*> {
          ++alloc_unsync;
          return std::malloc(n);
        },
        [this](void* p) {
          ++free_unsync;
          std::free(p);
        },
        [this] { return outstanding.load(); }};
  }
};
}  // namespace

TEST_CASE("quiet device: the synchronizing calls are used") {
  FakeOps f;
  SignalSafeMemory m(f.ops());
  void* d = m.alloc(0, 100).value();
  void* h = m.alloc_pinned(100).value();
  m.free(d);
  m.free_pinned(h);
  CHECK(f.alloc_sync == 1);
  CHECK(f.pinned_sync == 1);
  CHECK(f.free_sync == 1);
  CHECK(f.free_pinned_sync == 1);
  CHECK(f.alloc_unsync == 0);
  CHECK(m.stats().unsync_allocs == 0);
}

TEST_CASE("a signal wait outstanding: no synchronizing call; frees wait until the device is quiet") {
  FakeOps f;
  SignalSafeMemory m(f.ops());
  void* d_before = m.alloc(0, 64).value();  // quiet: cudaMalloc
  void* h_before = m.alloc_pinned(64).value();
  f.outstanding = true;
  void* d = m.alloc(0, 100).value();
  void* h = m.alloc_pinned(100).value();
  static_cast<char*>(h)[99] = 1;  // ordinary host memory
  CHECK(f.alloc_sync == 1);
  CHECK(f.pinned_sync == 1);
  CHECK(f.alloc_unsync == 1);
  m.free(d);             // its own kind of free, at once
  m.free_pinned(h);      // pageable: std::free
  m.free(d_before);      // cudaFree would synchronize: deferred
  m.free_pinned(h_before);
  CHECK(f.free_unsync == 1);
  CHECK(f.free_sync == 0);
  CHECK(f.free_pinned_sync == 0);
  SignalSafeMemory::Stats s = m.stats();
  CHECK(s.unsync_allocs == 1);
  CHECK(s.pageable_allocs == 1);
  CHECK(s.deferred_frees == 2);
  f.outstanding = false;
  void* q = m.alloc(0, 10).value();  // the next call on a quiet device runs the deferred frees
  CHECK(f.free_sync == 1);
  CHECK(f.free_pinned_sync == 1);
  m.free(q);
}

TEST_CASE("the pinned reserve serves pinned requests while a wait is outstanding") {
  FakeOps f;
  SignalSafeMemory m(f.ops(), 4u << 20);  // a 4 MiB reserve
  m.top_up();                             // quiet: 8 blocks of 512 KiB
  CHECK(f.pinned_sync == 8);
  CHECK(m.stats().reserve_bytes == (4u << 20));
  f.outstanding = true;
  void* a = m.alloc_pinned(300 << 10).value();  // from the reserve
  void* big = m.alloc_pinned(1 << 20).value();  // larger than its blocks: pageable
  CHECK(m.stats().reserve_allocs == 1);
  CHECK(m.stats().pageable_allocs == 1);
  CHECK(m.stats().reserve_bytes == (4u << 20) - (512u << 10));
  m.free_pinned(a);  // back into the reserve, never to cudaFreeHost
  m.free_pinned(big);
  CHECK(m.stats().reserve_bytes == (4u << 20));
  CHECK(f.free_pinned_sync == 0);
  m.top_up();  // not quiet: nothing changes
  CHECK(f.pinned_sync == 8);
  f.outstanding = false;
  m.top_up();  // quiet, and 1 MiB was asked for: the 512 KiB blocks make room for 1 MiB ones
  CHECK(f.free_pinned_sync == 8);
  CHECK(f.pinned_sync == 8 + 4);
  f.outstanding = true;
  void* c = m.alloc_pinned(1 << 20).value();
  CHECK(m.stats().reserve_allocs == 2);
  m.free_pinned(c);
}

TEST_CASE("run_when_quiet: at once on a quiet device, else at the next quiet call") {
  FakeOps f;
  SignalSafeMemory m(f.ops());
  int ran = 0;
  m.run_when_quiet([&] { ++ran; });
  CHECK(ran == 1);
  f.outstanding = true;
  m.run_when_quiet([&] { ++ran; });  // cudaIpcCloseMemHandle would wait for the waiting stream
  void* d = m.alloc(0, 8).value();
  CHECK(ran == 1);
  f.outstanding = false;
  void* h = m.alloc_pinned(8).value();  // quiet again: the deferred call runs first
  CHECK(ran == 2);
  m.free_pinned(h);
  m.free(d);
}

TEST_CASE("a signal wait is not queued while a synchronizing call runs") {
  FakeOps f;
  std::promise<void> in_call;
  std::atomic<bool> release{false};
  SignalSafeMemory::Ops ops = f.ops();
  ops.alloc_sync = [&](int, size_t n) -> Result<void*> {
    in_call.set_value();
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return std::malloc(n);
  };
  SignalSafeMemory m(ops);
  std::thread t([&] { m.free(m.alloc(0, 8).value()); });
  in_call.get_future().wait();
  std::atomic<bool> queued{false};
  std::thread w([&] { (void)m.enqueue_wait([&] { queued = true; return Status::Ok(); }); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_FALSE(queued.load());  // held back until the synchronizing call returned
  release = true;
  t.join();
  w.join();
  CHECK(queued.load());
}

TEST_CASE("sim device: allocating while a stream waits on a signal does not wait for that stream") {
  SimOptions o;
  o.name = "sim-signal-test";
  SimBackend b(o);
  auto s = b.create_stream(0);
  REQUIRE(s.ok());
  auto sig = b.create_signal(0);
  REQUIRE(sig.ok());
  REQUIRE(b.stream_wait_signal(s.value().get(), sig.value(), StreamWaitMode::kSignal).ok());
  // Without the policy each of these would wait for the stream, which waits for the signal
  // that only this thread raises (below): the test would hang (ctest's timeout).
  auto fut = std::async(std::launch::async, [&] {
    void* d = b.alloc(0, 4096).value();
    void* h = b.alloc_pinned(4096).value();
    b.free(d);
    b.free_pinned(h);
  });
  const bool done = fut.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  CHECK(done);
  sig.value()->raise();
  fut.wait();
  REQUIRE(b.synchronize(s.value().get()).ok());
  SignalSafeMemory::Stats st = b.memory_stats();
  CHECK(st.unsync_allocs == 1);
  CHECK(st.reserve_allocs == 1);  // stream_wait_signal filled the pinned reserve before the wait
  CHECK(st.pageable_allocs == 0);
  // The stream is past its wait now: allocations synchronize (and run) again.
  void* d = b.alloc(0, 64).value();
  b.free(d);
  CHECK(b.memory_stats().unsync_allocs == 1);
}
