// Verbs transport data-path tests on real Soft-RoCE (rxe0/rxe1 in the vm-run VM).
// Not a *_test.cc: ctest on the host (no RDMA devices) must not pick it up.
// Run: tests/verbs/run_vm_tests.sh  (builds this file against build/dev/libuccl.so).
//
// Each scenario forks two ranks (verbs_pair.h) on a device pair: rxe0<->rxe1 across the veth,
// and rxe0<->rxe0 (rxe loopback). A failed check ends its rank with a non-zero exit code
// (run_checked_pair), which fails the test case.
#include <sys/mman.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "verbs_vmtest.h"

using namespace uccl;
using namespace vmtest;

// ---- scenarios -------------------------------------------------------------------------------

// Sizes 0 .. 16 MiB, both directions at once, data verified.
static int sizes(Rank& r) {
  const size_t kSizes[] = {0, 1, 7, 4096 + 3, 8192, 8193, 1 << 20, 16 << 20};
  uint64_t op = 0;
  for (size_t n : kSizes) {
    std::vector<uint8_t> out(n + 1), in(n + 1, 0xEE);
    fill(out.data(), n, static_cast<uint32_t>(n * 3 + r.rank));
    SendRequest s;
    s.data = out.data(), s.bytes = n, s.env = env(++op, 0, n);
    RecvRequest q;
    q.dst = in.data(), q.bytes = n, q.expect = env(op, 0, n);
    r.ep->post_recv(&q);
    r.ep->post_send(&s);
    REQUIRE(vmtest::wait_all(r.ep.get(), {&s, &q}));
    if (!s.error.ok() || !q.error.ok())
      std::fprintf(stderr, "size %zu: %s / %s\n", n, s.error.to_string().c_str(), q.error.to_string().c_str());
    REQUIRE((s.state == ReqState::kDone && q.state == ReqState::kDone));
    REQUIRE(check_fill(in.data(), n, static_cast<uint32_t>(n * 3 + 1 - r.rank)));
    REQUIRE(in[n] == 0xEE);  // nothing written past the end
  }
  REQUIRE(r.ep->counters().messages_sent == sizeof kSizes / sizeof kSizes[0]);
  if (r.rank == 0) std::printf("  sizes ok: %s\n", r.ep->describe().c_str());
  return 0;
}

// Many messages of mixed sizes (eager and rendezvous) in flight; completion strictly FIFO.
static int fifo(Rank& r) {
  const size_t kSizes[] = {0, 1, 100, 8192, 8193, 20000, 70000, 300000};
  const int kCount = 240;
  std::vector<std::vector<uint8_t>> out(kCount), in(kCount);
  std::vector<SendRequest> s(kCount);
  std::vector<RecvRequest> q(kCount);
  for (int i = 0; i < kCount; ++i) {
    size_t n = kSizes[i % 8];
    out[i].resize(n), in[i].assign(n, 0);
    fill(out[i].data(), n, 1000 + i * 2 + r.rank);
    q[i].dst = in[i].data(), q[i].bytes = n, q[i].expect = env(77, i, n);
    s[i].data = out[i].data(), s[i].bytes = n, s[i].env = env(77, i, n);
  }
  // Rank 0 posts its receives late, so eager messages wait unexpected and sends queue up.
  if (r.rank == 1)
    for (auto& x : q) r.ep->post_recv(&x);
  for (auto& x : s) r.ep->post_send(&x);
  if (r.rank == 0)
    for (auto& x : q) r.ep->post_recv(&x);
  double deadline = vmtest::now_s() + 120;
  for (;;) {
    r.ep->progress();
    int done_s = 0, done_q = 0;
    bool hole = false;
    for (int i = 0; i < kCount; ++i) {
      if (!s[i].pending()) hole |= done_s != i, ++done_s;
      if (!q[i].pending()) hole |= done_q != i, ++done_q;
    }
    REQUIRE(!hole);  // a later request completed before an earlier one
    if (done_s == kCount && done_q == kCount) break;
    REQUIRE(vmtest::now_s() < deadline);
  }
  for (int i = 0; i < kCount; ++i) {
    REQUIRE((s[i].state == ReqState::kDone && q[i].state == ReqState::kDone));
    REQUIRE(check_fill(in[i].data(), in[i].size(), 1000 + i * 2 + 1 - r.rank));
  }
  if (r.rank == 0) std::printf("  fifo ok: %d messages each way\n", kCount);
  return 0;
}

// Reduce receives, float32 sum: eager and rendezvous, acc == dst and acc separate.
static int reduce_sum(Rank& r) {
  const size_t kCounts[] = {1000, 1 << 20};
  uint64_t op = 100;
  for (size_t count : kCounts) {
    for (int separate_acc = 0; separate_acc < 2; ++separate_acc) {
      std::vector<float> mine(count), dst(count, 0.f), acc(count);
      for (size_t i = 0; i < count; ++i) {
        mine[i] = static_cast<float>(i % 1000) * 0.5f + r.rank;
        acc[i] = 3.0f;
        dst[i] = separate_acc ? -1.f : 3.0f;
      }
      SendRequest s;
      s.data = mine.data(), s.bytes = count * 4, s.env = env(++op, 0, count);
      s.env.dtype = static_cast<uint8_t>(DataType::kFloat32);
      RecvRequest q;
      q.dst = dst.data(), q.bytes = count * 4, q.expect = s.env;
      q.reduce = true, q.dtype = DataType::kFloat32, q.op = RedOp::kSum;
      q.acc = separate_acc ? acc.data() : nullptr;
      r.ep->post_recv(&q);
      r.ep->post_send(&s);
      REQUIRE(vmtest::wait_all(r.ep.get(), {&s, &q}));
      REQUIRE((s.state == ReqState::kDone && q.state == ReqState::kDone));
      for (size_t i = 0; i < count; ++i) {
        float want = 3.0f + static_cast<float>(i % 1000) * 0.5f + (1 - r.rank);
        if (dst[i] != want) {
          std::fprintf(stderr, "reduce count %zu: dst[%zu] = %g, want %g\n", count, i, dst[i], want);
          return 1;
        }
      }
    }
  }
  if (r.rank == 0) std::printf("  reduce float32 sum ok (eager + rendezvous, acc in place + separate)\n");
  return 0;
}

// Mismatched envelopes or sizes fail with kMismatch without writing dst; the endpoint goes on.
static int mismatch(Rank& r) {
  struct Case {
    size_t send_bytes, recv_bytes;
    uint64_t send_op, recv_op;
    bool sender_fails;  // rendezvous with a CTS: the sender learns of it too
  };
  const Case kCases[] = {
      {100, 100, 5, 6, false},           // eager, other envelope
      {100, 200, 7, 7, false},           // eager, other size
      {1 << 20, 1 << 20, 8, 9, true},    // rendezvous, other envelope (sender checks the CTS)
      {100 << 10, 100, 10, 10, true},    // large sent, small expected: RTS refused
      {100, 100 << 10, 11, 11, false},   // small sent, large expected
  };
  for (const Case& c : kCases) {
    std::vector<uint8_t> out(c.send_bytes, 1), in(c.recv_bytes, 0x5A);
    SendRequest s;
    s.data = out.data(), s.bytes = c.send_bytes, s.env = env(c.send_op);
    RecvRequest q;
    q.dst = in.data(), q.bytes = c.recv_bytes, q.expect = env(c.recv_op);
    if (r.rank == 0) r.ep->post_send(&s);
    else r.ep->post_recv(&q);
    Request* mine = r.rank == 0 ? static_cast<Request*>(&s) : &q;
    REQUIRE(vmtest::wait_all(r.ep.get(), {mine}));
    if (r.rank == 1) {
      REQUIRE((q.state == ReqState::kFailed && q.error.code() == Code::kMismatch));
      REQUIRE(q.error.peer() == 0);
      for (uint8_t b : in) REQUIRE(b == 0x5A);
      if (c.send_bytes == (1u << 20)) std::printf("  mismatch message: %s\n", q.error.message().c_str());
    } else if (c.sender_fails) {
      REQUIRE((s.state == ReqState::kFailed && s.error.code() == Code::kMismatch));
    } else {
      REQUIRE(s.state == ReqState::kDone);
    }
  }
  // Still usable afterwards.
  uint32_t v = 42 + r.rank, got = 0;
  SendRequest s;
  s.data = &v, s.bytes = 4, s.env = env(99);
  RecvRequest q;
  q.dst = &got, q.bytes = 4, q.expect = env(99);
  r.ep->post_recv(&q);
  r.ep->post_send(&s);
  REQUIRE(vmtest::wait_all(r.ep.get(), {&s, &q}));
  REQUIRE((q.state == ReqState::kDone && got == 43u - r.rank));
  if (r.rank == 0) std::printf("  mismatch ok (5 cases, endpoint usable afterwards)\n");
  return 0;
}

// ---- test cases ------------------------------------------------------------------------------

namespace {

VerbsOptions two_qps() {
  VerbsOptions o;
  o.gid_index = -1;  // exercise the automatic RoCE v2 IPv4 pick
  o.qps_per_connection = 2;
  return o;
}

}  // namespace

// First, so that its child is forked before anything reads config(): UCCL_IB_HCA must be set
// before that in the child.
TEST_CASE("verbs_available: UCCL_IB_HCA matches nothing / no libibverbs") {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  CHECK(availability_checks());
}

TEST_CASE("data path on rxe0<->rxe1 and rxe0 loopback, 1 and 2 QPs") {
  struct PairCfg {
    const char* name;
    const char* a;
    const char* b;
  };
  const PairCfg kPairs[] = {{"rxe0<->rxe1", "=rxe0", "=rxe1"}, {"rxe0<->rxe0 loopback", "=rxe0", "=rxe0"}};
  for (const PairCfg& p : kPairs) {
    for (int qps : {1, 2}) {
      VerbsOptions o = two_qps();
      o.qps_per_connection = qps;
      const std::string tag = std::string(p.name) + ", " + std::to_string(qps) + " QP" + (qps > 1 ? "s" : "");
      CHECK_MESSAGE(run_checked_pair(p.a, p.b, o, sizes), "sizes 0..16 MiB both ways, " << tag);
      CHECK_MESSAGE(run_checked_pair(p.a, p.b, o, fifo), "FIFO, 240 in flight, " << tag);
      if (qps == 1) {
        CHECK_MESSAGE(run_checked_pair(p.a, p.b, o, reduce_sum), "reduce receive float32 sum, " << tag);
        CHECK_MESSAGE(run_checked_pair(p.a, p.b, o, mismatch), "mismatched envelope -> kMismatch, " << tag);
      }
    }
  }
}

TEST_CASE("registration cache reuse + invalidation on free/realloc") {
  CHECK(run_checked_pair("=rxe0", "=rxe1", two_qps(), mr_cache));
}

TEST_CASE("peer (receiver) killed mid-transfer -> kRemoteError") {
  CHECK(run_checked_pair("=rxe0", "=rxe1", two_qps(), killed_receiver, 120, /*killed=*/1));
}

TEST_CASE("peer (sender) killed mid-transfer -> kRemoteError") {
  CHECK(run_checked_pair("=rxe0", "=rxe1", two_qps(), killed_sender, 120, /*killed=*/0));
}

TEST_CASE("fail_all aborts locally, peer sees kRemoteError") {
  CHECK(run_checked_pair("=rxe0", "=rxe1", two_qps(), abort_one));
}

TEST_CASE("path drops everything -> retry exhaustion -> kRemoteError") {
  VerbsOptions quick = two_qps();  // 4.096us * 2^12 = 17 ms ack timeout, 2 retries
  quick.timeout = 12;
  quick.retry_cnt = 2;
  CHECK(run_checked_pair("=rxe0", "=rxe1", quick, retry_exhausted));
}
