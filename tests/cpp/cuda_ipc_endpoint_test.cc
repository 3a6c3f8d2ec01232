// The cuda_ipc endpoint's protocol without a GPU: a fake CUDA module (a device backend of kind
// kCuda over host memory it hands out, and an "IPC" that maps by address, since both endpoints
// live in this process) under two real CudaIpcEndpoints over a tcp endpoint pair. This checks
// the part the GPU cannot be needed for: control records, ACK rendezvous, payloads that come
// before their receive, every host/device combination of sender and receiver, fused and device
// reductions, zero-byte messages, mismatches and failures. The CUDA calls themselves (the real
// module) are covered by tests/gpu on a GPU machine.
#include <unistd.h>

#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "endpoint_test_util.h"
#include "test_util.h"
#include "base/device.h"
#include "base/net.h"
#include "base/reduce.h"

#if UCCL_HAVE_CUDA
#include "cuda/cuda_module.h"
#include "transports/cuda_ipc/cuda_ipc_endpoint.h"
#include "transports/cuda_ipc/cuda_ipc_transport.h"
#include "transports/registry.h"
#include "transports/tcp/tcp_transport.h"

using namespace uccl;

namespace {

struct FakeStream : DeviceStream {
  int ordinal() const override { return 0; }
  bool external() const override { return false; }
  uintptr_t handle() const override { return 0; }
};
struct FakeEvent : DeviceEvent {
  int polls_left = 0;
};

// Host memory posing as CUDA memory; work completes at once, events after a couple of polls
// (so the endpoint really waits on them).
class FakeCuda final : public DeviceBackend {
 public:
  const char* name() const override { return "fakecuda"; }
  MemoryKind kind() const override { return MemoryKind::kCuda; }
  bool available(std::string*) const override { return true; }
  int device_count() const override { return 1; }
  bool owns(const void* p, int* ord) const override {
    std::lock_guard<std::mutex> l(mu_);
    auto it = allocs_.upper_bound(reinterpret_cast<uintptr_t>(p));
    if (it == allocs_.begin()) return false;
    --it;
    if (reinterpret_cast<uintptr_t>(p) >= it->first + it->second.first) return false;
    if (ord) *ord = 0;
    return true;
  }
  // base, size, and a unique id per allocation (like CU_POINTER_ATTRIBUTE_BUFFER_ID: a freed
  // and reallocated address gets a new id)
  struct Info { uintptr_t base; size_t size; uint64_t id; };
  Info alloc_of(const void* p) const {
    std::lock_guard<std::mutex> l(mu_);
    auto it = --allocs_.upper_bound(reinterpret_cast<uintptr_t>(p));
    return {it->first, it->second.first, it->second.second};
  }
  Result<void*> alloc(int, size_t bytes) override {
    void* p = ::operator new(bytes);
    std::lock_guard<std::mutex> l(mu_);
    allocs_[reinterpret_cast<uintptr_t>(p)] = {bytes, ++next_id_};
    return p;
  }
  void free(void* p) override {
    if (!p) return;
    std::lock_guard<std::mutex> l(mu_);
    allocs_.erase(reinterpret_cast<uintptr_t>(p));
    ::operator delete(p);
  }
  Result<void*> alloc_pinned(size_t b) override { return ::operator new(b); }
  void free_pinned(void* p) override { ::operator delete(p); }
  Result<std::unique_ptr<DeviceStream>> create_stream(int) override {
    return std::unique_ptr<DeviceStream>(new FakeStream());
  }
  Result<std::unique_ptr<DeviceStream>> wrap_stream(int, uintptr_t) override {
    return std::unique_ptr<DeviceStream>(new FakeStream());
  }
  Status copy_async(void* d, const void* s, size_t n, CopyDir, DeviceStream*) override {
    std::memcpy(d, s, n);
    ++copies;
    return Status::Ok();
  }
  Status reduce_async(void* d, const void* a, const void* b, size_t n, DataType dt, RedOp op, DeviceStream*) override {
    reduce(d, a, b, n, dt, op);
    ++reduces;
    return Status::Ok();
  }
  Status scale_async(void* d, const void* s, size_t n, DataType dt, double f, DeviceStream*) override {
    scale(d, s, n, dt, f);
    return Status::Ok();
  }
  Status divide_async(void* d, const void* s, size_t n, DataType dt, int k, DeviceStream*) override {
    divide(d, s, n, dt, k);
    return Status::Ok();
  }
  Result<std::unique_ptr<DeviceEvent>> create_event() override { return std::unique_ptr<DeviceEvent>(new FakeEvent()); }
  Status record(DeviceEvent* e, DeviceStream*) override {
    static_cast<FakeEvent*>(e)->polls_left = 2;
    return Status::Ok();
  }
  Result<bool> query(DeviceEvent* e) override {
    auto* f = static_cast<FakeEvent*>(e);
    return f->polls_left-- <= 0;
  }
  Status stream_wait(DeviceStream*, DeviceEvent*) override { return Status::Ok(); }
  Status synchronize(DeviceStream*) override { return Status::Ok(); }

  int copies = 0, reduces = 0;

 private:
  mutable std::mutex mu_;
  std::map<uintptr_t, std::pair<size_t, uint64_t>> allocs_;
  uint64_t next_id_ = 0;
};

FakeCuda g_fake;
[[maybe_unused]] const bool g_reg = register_device_backend(&g_fake);

class FakeIpc final : public CudaIpc {
 public:
  Result<CudaIpcExport> export_ptr(const void* p) override {
    auto a = g_fake.alloc_of(p);
    CudaIpcExport x;
    std::memset(x.handle, 0, sizeof x.handle);
    std::memcpy(x.handle, &a.base, sizeof a.base);
    x.offset = reinterpret_cast<uintptr_t>(p) - a.base;
    x.alloc_bytes = a.size;
    x.buffer_id = a.id;
    x.ordinal = 0;
    ++exports;
    return x;
  }
  Result<void*> open(const CudaIpcExport& x, int) override {
    uintptr_t base;
    std::memcpy(&base, x.handle, sizeof base);
    ++opens;
    return reinterpret_cast<void*>(base);
  }
  Status close(void*, int) override {
    ++closes;
    return Status::Ok();
  }
  int device_by_pci(const std::string&) override { return 0; }
  std::string pci_bus_id(int) override { return "0000:00:00.0"; }
  bool context_active() override { return true; }
  int exports = 0, opens = 0, closes = 0;
};

FakeIpc g_ipc;
CudaModule g_mod{kCudaModuleAbi, &g_fake, &g_ipc};

using uccl_test::peer_ctx;

struct Pair {
  std::unique_ptr<Endpoint> a, b;
};

Pair make_pair() {
  uccl_test::TcpPair t = uccl_test::tcp_pair();
  Pair p;
  p.a.reset(new cuda_ipc::CudaIpcEndpoint(nullptr, std::move(t.a), peer_ctx(0, 1), &g_mod, false));
  p.b.reset(new cuda_ipc::CudaIpcEndpoint(nullptr, std::move(t.b), peer_ctx(1, 0), &g_mod, false));
  return p;
}

using uccl_test::drive;
using uccl_test::env;

// A float buffer in host or fake-device memory.
struct Buf {
  float* p = nullptr;
  size_t n = 0;
  bool dev = false;
  Buf(size_t count, bool device, float fill) : n(count), dev(device) {
    p = device ? static_cast<float*>(g_fake.alloc(0, count * 4 + 4).value()) : new float[count + 1];
    for (size_t i = 0; i < n; ++i) p[i] = fill + static_cast<float>(i % 7);
  }
  ~Buf() {
    if (dev) g_fake.free(p);
    else delete[] p;
  }
};

}  // namespace

TEST_CASE("cuda_ipc endpoint: every host/device combination, copy and reduce, early payloads") {
  Pair p = make_pair();
  for (bool sdev : {false, true})
    for (bool rdev : {false, true})
      for (bool red : {false, true})
        for (size_t n : {size_t{0}, size_t{1}, size_t{1023}, size_t{100003}}) {
          CAPTURE(sdev);
          CAPTURE(rdev);
          CAPTURE(red);
          CAPTURE(n);
          // Three messages each way, all sends posted before any receive: payloads arrive
          // early and ACKs cross them in the other direction.
          std::vector<std::unique_ptr<Buf>> src, dst;
          std::vector<SendRequest> sends(6);
          std::vector<RecvRequest> recvs(6);
          for (int i = 0; i < 6; ++i) {
            src.emplace_back(new Buf(n, sdev, static_cast<float>(10 * i)));
            dst.emplace_back(new Buf(n, rdev, 1.0f));
            sends[i].data = src[i]->p;
            sends[i].bytes = n * 4;
            sends[i].env = env(i, n);
            (i % 2 ? p.b : p.a)->post_send(&sends[i]);
          }
          for (int i = 0; i < 6; ++i) {
            recvs[i].dst = dst[i]->p;
            recvs[i].bytes = n * 4;
            recvs[i].expect = env(i, n);
            recvs[i].reduce = red;
            recvs[i].dtype = DataType::kFloat32;
            recvs[i].op = RedOp::kSum;
            (i % 2 ? p.a : p.b)->post_recv(&recvs[i]);
          }
          REQUIRE(drive(p, [&] {
            for (auto& r : recvs) if (r.pending()) return false;
            for (auto& s : sends) if (s.pending()) return false;
            return true;
          }));
          for (int i = 0; i < 6; ++i) {
            REQUIRE_OK(sends[i].error);
            REQUIRE_OK(recvs[i].error);
            size_t bad = 0;
            for (size_t k = 0; k < n; ++k) {
              const float want = 10.0f * i + static_cast<float>(k % 7) + (red ? 1.0f + static_cast<float>(k % 7) : 0.0f);
              if (dst[i]->p[k] != want) ++bad;
            }
            CHECK(bad == 0);
          }
        }
  CHECK(g_ipc.exports > 0);
  CHECK(g_fake.reduces > 0);  // device destinations with an IPC source reduce on the device
  CHECK(!p.a->has_pending());
  CHECK(!p.b->has_pending());
}

TEST_CASE("cuda_ipc endpoint: one mapping per peer allocation, and a bounded cache") {
  Pair p = make_pair();
  const int opens = g_ipc.opens, closes = g_ipc.closes;
  Buf reused(64, true, 5.0f);
  for (int i = 0; i < 140; ++i) {
    Buf fresh(64, true, static_cast<float>(i)), d(64, false, 0);
    SendRequest sr;
    sr.data = i % 2 ? fresh.p : reused.p;
    sr.bytes = 256;
    sr.env = env(i, 64);
    RecvRequest rr;
    rr.dst = d.p;
    rr.bytes = 256;
    rr.expect = env(i, 64);
    p.a->post_send(&sr);
    p.b->post_recv(&rr);
    REQUIRE(drive(p, [&] { return !sr.pending() && !rr.pending(); }));
    REQUIRE_OK(rr.error);
    CHECK(d.p[3] == (i % 2 ? static_cast<float>(i) : 5.0f) + 3.0f);
  }
  CHECK(g_ipc.opens - opens >= 71);  // 70 fresh allocations + the reused one
  CHECK(g_ipc.opens - opens < 140);  // the reused allocation is not mapped every time
  CHECK(g_ipc.closes > closes);      // more than 64: the cache was emptied at a quiet moment
}

TEST_CASE("cuda_ipc endpoint: a size mismatch fails the receive and names the peer") {
  Pair p = make_pair();
  Buf s(100, true, 0), d(50, true, 0);
  SendRequest sr;
  sr.data = s.p;
  sr.bytes = 400;
  sr.env = env(1, 100);
  RecvRequest rr;
  rr.dst = d.p;
  rr.bytes = 200;
  rr.expect = env(1, 100);
  p.a->post_send(&sr);
  p.b->post_recv(&rr);
  REQUIRE(drive(p, [&] { return !rr.pending(); }));
  CHECK(rr.state == ReqState::kFailed);
  CHECK(rr.error.code() == Code::kMismatch);
}

TEST_CASE("cuda_ipc endpoint: fail_all fails pending requests, later posts fail at once") {
  Pair p = make_pair();
  Buf s(10, true, 0);
  SendRequest sr;
  sr.data = s.p;
  sr.bytes = 40;
  sr.env = env(1, 10);
  p.a->post_send(&sr);  // waits for an ACK that never comes
  for (int i = 0; i < 100; ++i) p.a->progress();
  CHECK(sr.pending());
  p.a->fail_all(Status(Code::kAborted, "test abort"));
  CHECK(sr.state == ReqState::kFailed);
  CHECK(sr.error.code() == Code::kAborted);
  SendRequest later;
  later.data = s.p;
  later.bytes = 40;
  p.a->post_send(&later);
  CHECK(later.state == ReqState::kFailed);
  CHECK(!p.a->has_pending());
}

TEST_CASE("cuda_ipc transport: refuses with kNotSupported when CUDA is unusable (the table falls back)") {
  set_cuda_module_for_testing(nullptr);
  std::string why;
  if (cuda_module(&why) != nullptr) return;  // a GPU machine: nothing to refuse
  const TransportEntry* e = find_transport("cuda_ipc");
  REQUIRE(e != nullptr);
  CHECK(!e->available(&why));
  CHECK(e->native_device_memory);
  auto t = make_cuda_ipc_transport();
  auto c = t->start_connect(peer_ctx(0, 1));
  CHECK(c.status().code() == Code::kNotSupported);
  std::string answer;
  auto a = t->accept(peer_ctx(1, 0), "cuda_ipc1:shm:1:x", &answer, {});
  CHECK(a.status().code() == Code::kNotSupported);
}

TEST_CASE("cuda_ipc transport: handshake over shm, threads of one process use each other's pointers") {
  set_cuda_module_for_testing(&g_mod);
  auto t = make_cuda_ipc_transport();
  REQUIRE(t->sockets_per_connection() == 1);
  SockAddr addr = parse_address("127.0.0.1", 0).value();
  auto lfd = listen_on(&addr);
  REQUIRE_OK(lfd.status());
  auto cfd = connect_to(addr, now_s() + 5);
  REQUIRE_OK(cfd.status());
  int sfd = accept(lfd.value(), nullptr, nullptr);
  close(lfd.value());
  auto pc = t->start_connect(peer_ctx(0, 1));
  REQUIRE_OK(pc.status());
  std::unique_ptr<PendingConnect> pend(pc.value());
  const std::string offer = pend->offer();
  CHECK(offer.rfind("cuda_ipc1:shm:", 0) == 0);
  std::string answer;
  auto t2 = make_cuda_ipc_transport();
  auto eb = t2->accept(peer_ctx(1, 0), offer, &answer, {sfd});
  REQUIRE_OK(eb.status());
  auto ea = pend->finish(answer, {cfd.value()});
  REQUIRE_OK(ea.status());
  Pair p;
  p.a.reset(ea.value());
  p.b.reset(eb.value());
  CHECK(p.a->describe().find("same process") != std::string::npos);
  CHECK(p.a->describe().find("shm") != std::string::npos);
  const int exports = g_ipc.exports;
  Buf s(4099, true, 3.0f), d(4099, true, 1.0f), h(4099, false, 0.0f);
  SendRequest sr[2];
  RecvRequest rr[2];
  for (int i = 0; i < 2; ++i) {
    sr[i].data = s.p;
    sr[i].bytes = 4099 * 4;
    sr[i].env = env(i, 4099);
    rr[i].dst = i == 0 ? d.p : h.p;  // device then host destination
    rr[i].bytes = 4099 * 4;
    rr[i].expect = env(i, 4099);
    rr[i].reduce = i == 0;
    rr[i].dtype = DataType::kFloat32;
    rr[i].op = RedOp::kSum;
    p.a->post_send(&sr[i]);
    p.b->post_recv(&rr[i]);
  }
  REQUIRE(drive(p, [&] { return !sr[1].pending() && !rr[1].pending() && !sr[0].pending() && !rr[0].pending(); }));
  for (int i = 0; i < 2; ++i) {
    REQUIRE_OK(sr[i].error);
    REQUIRE_OK(rr[i].error);
  }
  size_t bad = 0;
  for (size_t k = 0; k < 4099; ++k) {
    const float v = 3.0f + static_cast<float>(k % 7);
    if (d.p[k] != v + 1.0f + static_cast<float>(k % 7) || h.p[k] != v) ++bad;
  }
  CHECK(bad == 0);
  CHECK(g_ipc.exports == exports);  // direct pointers: nothing exported
  p.a.reset();
  p.b.reset();
  set_cuda_module_for_testing(nullptr);
}
#else
TEST_CASE("cuda_ipc endpoint: not built without CUDA") {}
#endif
