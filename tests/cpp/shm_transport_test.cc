// Data path of the shm transport across two processes: sizes around the ring and CMA
// boundaries, many messages in flight (FIFO), bidirectional exchange with full rings, and
// reduce receives. Failure behaviour is in shm_failure_test.cc.
#include <cmath>

#include "base/reduce.h"
#include "shm_test_util.h"

using namespace shmtest;

namespace {

const std::vector<size_t> kSizes = {0, 1, 7, 4096 + 3, (4u << 20) + 3, 64u << 20};

// Sends each size one way, then the other way, and checks content and the CMA counters. The
// sends say they are exchange steps (duplex), so with push on every CMA message is pushed.
void test_sizes(bool cma, bool push) {
  auto body = [&](Endpoint* ep) -> int {
    for (size_t k = 0; k < kSizes.size(); ++k) {  // receive from the parent
      std::vector<uint8_t> buf(kSizes[k] + 1, 0xee);
      RecvRequest r;
      r.dst = buf.data();
      r.bytes = kSizes[k];
      r.expect = env_for(k);
      ep->post_recv(&r);
      REQUIRE_OK(drive(ep, {&r}));
      REQUIRE(check_payload(buf.data(), kSizes[k], k));
      REQUIRE(buf[kSizes[k]] == 0xee);  // nothing written past the end
    }
    for (size_t k = 0; k < kSizes.size(); ++k) {  // and send back
      std::vector<uint8_t> payload = make_payload(kSizes[k], 100 + k);
      SendRequest s;
      s.data = payload.data();
      s.bytes = kSizes[k];
      s.env = env_for(100 + k);
      s.duplex = true;
      ep->post_send(&s);
      REQUIRE_OK(drive(ep, {&s}));
    }
    return 0;
  };
  std::unique_ptr<Endpoint> ep;
  pid_t child = fork_pair(options(cma, 4 << 20, push), options(cma, 4 << 20, push), &ep, body);
  CHECK(leftover_segments() == 0);  // unlinked as soon as setup finished
  std::printf("  %s\n", ep->describe().c_str());
  CHECK(ep->describe().find(cma ? "(pid" : "no cma") != std::string::npos);
  for (size_t k = 0; k < kSizes.size(); ++k) {
    std::vector<uint8_t> payload = make_payload(kSizes[k], k);
    SendRequest s;
    s.data = payload.data();
    s.bytes = kSizes[k];
    s.env = env_for(k);
    s.duplex = true;  // push is for exchange steps
    ep->post_send(&s);
    REQUIRE_OK(drive(ep.get(), {&s}));
  }
  for (size_t k = 0; k < kSizes.size(); ++k) {
    std::vector<uint8_t> buf(kSizes[k]);
    RecvRequest r;
    r.dst = buf.data();
    r.bytes = kSizes[k];
    r.expect = env_for(100 + k);
    ep->post_recv(&r);
    REQUIRE_OK(drive(ep.get(), {&r}));
    CHECK(check_payload(buf.data(), kSizes[k], 100 + k));
  }
  const shm::ShmStats& st = as_shm(ep.get())->stats();
  std::printf("  cma=%d push=%d: ring sends %llu, cma sends %llu, push sends %llu, ring recvs %llu, cma recvs %llu, "
              "push recvs %llu\n",
              cma, push, (unsigned long long)st.ring_sends, (unsigned long long)st.cma_sends,
              (unsigned long long)st.push_sends, (unsigned long long)st.ring_recvs, (unsigned long long)st.cma_recvs,
              (unsigned long long)st.push_recvs);
  if (cma && as_shm(ep.get())->cma_send_enabled()) {
    // 4 MiB+3 and 64 MiB each way
    if (push) {
      CHECK((st.push_sends == 2 && st.push_recvs == 2 && st.cma_sends == 0 && st.cma_recvs == 0));
    } else {
      CHECK((st.cma_sends == 2 && st.cma_recvs == 2 && st.push_sends == 0 && st.push_recvs == 0));
    }
  } else {
    CHECK((st.cma_sends == 0 && st.cma_recvs == 0 && st.push_sends == 0 && st.push_recvs == 0));
  }
  CHECK(ep->counters().messages_sent == kSizes.size());
  CHECK(join(child) == 0);
  ep.reset();
  CHECK(leftover_segments() == 0);
}

// The two sides configured differently: CMA on one side only (the ring must carry
// everything), and a piece size on the passive side larger than the active side's ring allows.
TEST_CASE("asymmetric options") {
  ShmOptions parent = options(true, 64 << 10), child = options(false);
  parent.piece_bytes = 16 << 10;
  child.piece_bytes = 256 << 10;
  const std::vector<size_t> sizes = {5, 16 << 10, (1u << 20) + 3, 3u << 20};
  auto body = [&](Endpoint* ep) -> int {
    for (size_t k = 0; k < sizes.size(); ++k) {
      std::vector<uint8_t> out = make_payload(sizes[k], 50 + k), in(sizes[k]);
      SendRequest s;
      s.data = out.data();
      s.bytes = sizes[k];
      s.env = env_for(k);
      RecvRequest r;
      r.dst = in.data();
      r.bytes = sizes[k];
      r.expect = env_for(k);
      ep->post_send(&s);
      ep->post_recv(&r);
      REQUIRE_OK(drive(ep, {&s, &r}));
      REQUIRE(check_payload(in.data(), sizes[k], k));
    }
    REQUIRE((as_shm(ep)->stats().cma_sends == 0 && as_shm(ep)->stats().push_sends == 0));
    return 0;
  };
  std::unique_ptr<Endpoint> ep;
  pid_t child_pid = fork_pair(parent, child, &ep, body);
  for (size_t k = 0; k < sizes.size(); ++k) {
    std::vector<uint8_t> out = make_payload(sizes[k], k), in(sizes[k]);
    SendRequest s;
    s.data = out.data();
    s.bytes = sizes[k];
    s.env = env_for(k);
    RecvRequest r;
    r.dst = in.data();
    r.bytes = sizes[k];
    r.expect = env_for(k);
    ep->post_send(&s);
    ep->post_recv(&r);
    REQUIRE_OK(drive(ep.get(), {&s, &r}));
    CHECK(check_payload(in.data(), sizes[k], 50 + k));
  }
  CHECK(as_shm(ep.get())->stats().cma_sends == 0);  // the child does not allow CMA
  CHECK(as_shm(ep.get())->stats().push_sends == 0);
  CHECK(join(child_pid) == 0);
}

// Two ranks in one process (threads-as-ranks test harnesses): both endpoints driven from one
// thread, CMA reading our own memory, ring and CMA sizes both ways.
void test_same_process(bool cma) {
  int sv[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  auto t = make_shm_transport(options(cma));
  Result<PendingConnect*> pc = t->start_connect(peer_ctx(0, 1));
  REQUIRE_OK(pc.status());
  std::unique_ptr<PendingConnect> pending(pc.value());
  std::string answer;
  Result<Endpoint*> b = t->accept(peer_ctx(1, 0), pending->offer(), &answer, {sv[1]});
  REQUIRE_OK(b.status());
  Result<Endpoint*> a = pending->finish(answer, {sv[0]});
  REQUIRE_OK(a.status());
  std::unique_ptr<Endpoint> ea(a.value()), eb(b.value());
  CHECK(leftover_segments() == 0);
  for (size_t bytes : {size_t(0), size_t(100), size_t(5u << 20) + 1}) {
    std::vector<uint8_t> out_a = make_payload(bytes, 1), out_b = make_payload(bytes, 2), in_a(bytes), in_b(bytes);
    SendRequest sa, sb;
    RecvRequest ra, rb;
    sa.data = out_a.data();
    sb.data = out_b.data();
    sa.bytes = sb.bytes = ra.bytes = rb.bytes = bytes;
    ra.dst = in_a.data();
    rb.dst = in_b.data();
    sa.env = sb.env = ra.expect = rb.expect = env_for(3);
    ea->post_send(&sa);
    ea->post_recv(&ra);
    eb->post_send(&sb);
    eb->post_recv(&rb);
    const double deadline = now_s() + 30;
    while (sa.pending() || sb.pending() || ra.pending() || rb.pending()) {
      ea->progress();
      eb->progress();
      CHECK(now_s() < deadline);
    }
    for (Request* r : std::initializer_list<Request*>{&sa, &sb, &ra, &rb}) CHECK(r->state == ReqState::kDone);
    CHECK(check_payload(in_a.data(), bytes, 2));
    CHECK(check_payload(in_b.data(), bytes, 1));
  }
  const shm::ShmStats& st = as_shm(ea.get())->stats();
  CHECK((st.cma_sends + st.push_sends > 0) == cma);
}

// Only messages inside [cma_min_bytes, cma_max_bytes] take the CMA path.
TEST_CASE("cma window") {
  ShmOptions o = options(true);
  o.cma_max_bytes = 2 << 20;
  const std::vector<size_t> sizes = {(1u << 20) - 1, 1u << 20, 2u << 20, (2u << 20) + 1};
  auto body = [&](Endpoint* ep) -> int {
    for (size_t k = 0; k < sizes.size(); ++k) {
      std::vector<uint8_t> in(sizes[k]);
      RecvRequest r;
      r.dst = in.data();
      r.bytes = sizes[k];
      r.expect = env_for(k);
      ep->post_recv(&r);
      REQUIRE_OK(drive(ep, {&r}));
      REQUIRE(check_payload(in.data(), sizes[k], k));
    }
    return 0;
  };
  std::unique_ptr<Endpoint> ep;
  pid_t child = fork_pair(o, o, &ep, body);
  for (size_t k = 0; k < sizes.size(); ++k) {
    std::vector<uint8_t> out = make_payload(sizes[k], k);
    SendRequest s;
    s.data = out.data();
    s.bytes = sizes[k];
    s.env = env_for(k);
    ep->post_send(&s);
    REQUIRE_OK(drive(ep.get(), {&s}));
  }
  const shm::ShmStats& st = as_shm(ep.get())->stats();
  CHECK((st.cma_sends + st.push_sends == 2 && st.ring_sends == 2));
  CHECK(join(child) == 0);
}

// Thousands of messages posted at once, sizes mixing inline, multi-piece and CMA: they must
// arrive and complete in posting order.
TEST_CASE("fifo, many in flight") {
  const int kCount = 3000;
  auto size_of = [](int k) -> size_t {
    if (k % 500 == 7) return (1u << 20) + k;  // CMA
    if (k % 50 == 3) return 100000 + k;       // several pieces
    return static_cast<size_t>((k * 37) % 700);
  };
  auto body = [&](Endpoint* ep) -> int {
    std::vector<std::vector<uint8_t>> bufs(kCount);
    std::vector<RecvRequest> reqs(kCount);
    std::vector<Request*> all;
    for (int k = 0; k < kCount; ++k) {
      bufs[k].resize(size_of(k));
      reqs[k].dst = bufs[k].data();
      reqs[k].bytes = size_of(k);
      reqs[k].expect = env_for(5, static_cast<uint32_t>(k));
      ep->post_recv(&reqs[k]);
      all.push_back(&reqs[k]);
    }
    REQUIRE_OK(drive(ep, all));
    for (int k = 0; k < kCount; ++k) REQUIRE(check_payload(bufs[k].data(), size_of(k), k));
    return 0;
  };
  std::unique_ptr<Endpoint> ep;
  pid_t child = fork_pair(options(true, 256 << 10), options(true, 256 << 10), &ep, body);
  std::vector<std::vector<uint8_t>> payloads(kCount);
  std::vector<SendRequest> reqs(kCount);
  for (int k = 0; k < kCount; ++k) {
    payloads[k] = make_payload(size_of(k), k);
    reqs[k].data = payloads[k].data();
    reqs[k].bytes = size_of(k);
    reqs[k].env = env_for(5, static_cast<uint32_t>(k));
    ep->post_send(&reqs[k]);
  }
  // Completion order is FIFO: whenever request k is done, every earlier one is done too.
  int done_prefix = 0;
  const double deadline = now_s() + 60;
  while (done_prefix < kCount) {
    ep->progress();
    for (int k = done_prefix; k < kCount; ++k) {
      CHECK(reqs[k].state != ReqState::kFailed);
      if (reqs[k].state == ReqState::kDone) {
        CHECK(k == done_prefix);
        ++done_prefix;
      }
    }
    CHECK(now_s() < deadline);
  }
  CHECK(join(child) == 0);
}

// Both sides send and receive `bytes` at once, `iters` times, with rings much smaller than the
// messages: the ring-allreduce step pattern. Must never deadlock.
void test_bidirectional(bool cma, size_t bytes, int iters, bool push = true) {
  auto exchange = [=](Endpoint* ep, uint64_t my_seed, uint64_t peer_seed) -> int {
    std::vector<uint8_t> out = make_payload(bytes, my_seed), in(bytes);
    for (int it = 0; it < iters; ++it) {
      SendRequest s;
      s.data = out.data();
      s.bytes = bytes;
      s.env = env_for(it);
      RecvRequest r;
      r.dst = in.data();
      r.bytes = bytes;
      r.expect = env_for(it);
      ep->post_send(&s);
      ep->post_recv(&r);
      REQUIRE_OK(drive(ep, {&s, &r}));
      CHECK(check_payload(in.data(), bytes, peer_seed));
    }
    return 0;
  };
  std::unique_ptr<Endpoint> ep;
  pid_t child = fork_pair(options(cma, 256 << 10, push), options(cma, 256 << 10, push), &ep,
                          [&](Endpoint* e) { return exchange(e, 2, 1); });
  CHECK(exchange(ep.get(), 1, 2) == 0);
  CHECK(join(child) == 0);
}

template <class T>
std::vector<T> values(size_t n, int seed, T (*gen)(size_t, int)) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = gen(i, seed);
  return v;
}

// Reduce receives: the parent sends `a`, the child reduce-receives into dst with acc = b (or
// dst = b, acc null) and compares with uccl::reduce computed locally.
void test_reduce(DataType dt, RedOp op, size_t count, bool cma, bool with_acc) {
  const size_t esz = dtype_size(dt), bytes = count * esz;
  auto fill = [&](int seed) {
    std::vector<uint8_t> v(bytes);
    for (size_t i = 0; i < count; ++i) {
      if (dt == DataType::kFloat32) {
        float f = static_cast<float>((i * 7 + seed * 13) % 1000) * 0.25f - 100.f;
        std::memcpy(&v[i * 4], &f, 4);
      } else if (dt == DataType::kBFloat16) {
        float f = static_cast<float>((i * 5 + seed * 3) % 200) * 0.5f - 50.f;
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        uint16_t h = static_cast<uint16_t>(bits >> 16);  // exact: few mantissa bits
        std::memcpy(&v[i * 2], &h, 2);
      } else {
        v[i * esz] = static_cast<uint8_t>((i * 31 + seed * 17) & 0xff);
      }
    }
    return v;
  };
  const std::vector<uint8_t> a = fill(1), b = fill(2);
  std::vector<uint8_t> expect(bytes);
  reduce(expect.data(), b.data(), a.data(), count, dt, op);
  auto body = [&](Endpoint* ep) -> int {
    std::vector<uint8_t> dst(bytes), acc = b;
    if (!with_acc) dst = b;
    RecvRequest r;
    r.dst = dst.data();
    r.bytes = bytes;
    r.expect = env_for(9);
    r.reduce = true;
    r.acc = with_acc ? acc.data() : nullptr;
    r.dtype = dt;
    r.op = op;
    ep->post_recv(&r);
    REQUIRE_OK(drive(ep, {&r}));
    REQUIRE((bytes == 0 || std::memcmp(dst.data(), expect.data(), bytes) == 0));  // memcmp(nullptr, .., 0) is UB
    REQUIRE(acc == b);
    return 0;
  };
  std::unique_ptr<Endpoint> ep;
  pid_t child = fork_pair(options(cma, 256 << 10), options(cma, 256 << 10), &ep, body);
  SendRequest s;
  s.data = a.data();
  s.bytes = bytes;
  s.env = env_for(9);
  ep->post_send(&s);
  REQUIRE_OK(drive(ep.get(), {&s}));
  CHECK(join(child) == 0);
}

TEST_CASE("sizes, cma push") { test_sizes(true, true); }
TEST_CASE("sizes, cma pull") { test_sizes(true, false); }
TEST_CASE("sizes, cma off") { test_sizes(false, true); }

TEST_CASE("two endpoints in one process") {
  test_same_process(true);
  test_same_process(false);
}

TEST_CASE("bidirectional exchanges never deadlock") {
  test_bidirectional(false, (16u << 20) + 5, 3);
  test_bidirectional(true, (16u << 20) + 5, 3);
  test_bidirectional(false, 1000, 200);
  test_bidirectional(true, 64u << 20, 1);
  test_bidirectional(true, (16u << 20) + 5, 3, false);
}

TEST_CASE("reduce receives") {
  for (bool cma : {false, true}) {
    for (bool acc : {false, true}) {
      CAPTURE(cma);
      CAPTURE(acc);
      test_reduce(DataType::kFloat32, RedOp::kSum, (1u << 20) + 3, cma, acc);  // 4 MiB + 12: multi piece / CMA
      test_reduce(DataType::kBFloat16, RedOp::kSum, (1u << 20) + 1, cma, acc);
      test_reduce(DataType::kInt8, RedOp::kMax, (2u << 20) + 7, cma, acc);
    }
  }
  test_reduce(DataType::kFloat32, RedOp::kSum, 5, false, true);  // single small message
  test_reduce(DataType::kFloat32, RedOp::kSum, 0, false, false);
}

TEST_CASE("no segment of this process is left in /dev/shm") { CHECK(leftover_segments() == 0); }

}  // namespace
