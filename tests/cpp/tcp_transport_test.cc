// The tcp transport over real loopback sockets, both endpoints in one process, driven by one
// loop calling progress() on both (so nothing may block). Covers sizes (0, 1, 7, 4099, 1 MiB,
// 64 MiB striped), FIFO with many messages in flight, receives posted late, fused reductions,
// envelope/size mismatches, garbage, peer close (idle and mid-transfer), fail_all, wait_fd.
#include <poll.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "endpoint_test_util.h"
#include "test_util.h"
#include "base/net.h"
#include "transports/tcp/tcp_endpoint.h"  // PartHeader, to hand-craft wire bytes
#include "transports/tcp/tcp_transport.h"

using namespace uccl;

namespace {

struct Pair {
  std::unique_ptr<Endpoint> a, b;  // a = active (connecting) side, b = passive
};

using uccl_test::peer_ctx;

// nsocks connected socket pairs over 127.0.0.1, in the same order on both sides.
void socket_pairs(int nsocks, std::vector<int>* a, std::vector<int>* b) {
  SockAddr addr = parse_address("127.0.0.1", 0).value();
  auto lfd = listen_on(&addr);
  REQUIRE_OK(lfd.status());
  for (int i = 0; i < nsocks; ++i) {
    auto c = connect_to(addr, now_s() + 5);
    REQUIRE_OK(c.status());
    int s = accept(lfd.value(), nullptr, nullptr);
    REQUIRE(s >= 0);
    a->push_back(c.value());
    b->push_back(s);
  }
  close(lfd.value());
}

// lanes: PeerContext::lane_gbps on both sides (sockets weighted by lane rates; all over loopback here).
Pair make_pair(int nsocks, std::vector<double> lanes = {}) {
  auto t = make_tcp_transport(nsocks);
  CHECK(t->sockets_per_connection() == nsocks);
  std::vector<int> fa, fb;
  socket_pairs(nsocks, &fa, &fb);
  PeerContext ca = peer_ctx(0, 1), cb = peer_ctx(1, 0);
  for (double g : lanes) {
    for (PeerContext* c : {&ca, &cb}) {
      c->lane_gbps.push_back(g);
      c->lane_names.push_back("net" + std::to_string(c->lane_names.size()));
    }
  }
  auto pc = t->start_connect(ca);
  REQUIRE_OK(pc.status());
  std::unique_ptr<PendingConnect> c(pc.value());
  std::string answer;
  auto eb = t->accept(cb, c->offer(), &answer, fb);
  REQUIRE_OK(eb.status());
  auto ea = c->finish(answer, fa);
  REQUIRE_OK(ea.status());
  return Pair{std::unique_ptr<Endpoint>(ea.value()), std::unique_ptr<Endpoint>(eb.value())};
}

// Drives both endpoints until done() or the time limit; returns false on timeout.
using uccl_test::drive;
using uccl_test::env;

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    v[i] = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

void test_sizes(int nsocks, std::vector<double> lanes = {}) {
  Pair p = make_pair(nsocks, lanes);
  CHECK(p.a->describe().find("tcp 127.0.0.1:") == 0);
  if (lanes.empty())
    CHECK(p.a->describe().find("(" + std::to_string(nsocks) + (nsocks == 1 ? " socket)" : " sockets)")) != std::string::npos);
  else
    CHECK(p.a->describe().find(" sockets striped over net0") != std::string::npos);
  CHECK(p.a->kind() == TransportKind::kTcp);
  const size_t sizes[] = {0, 1, 7, 4096 + 3, 1 << 20, (64 << 20) + 5};
  uint64_t total = 0;
  for (size_t sz : sizes) {
    auto src = pattern(sz, static_cast<uint32_t>(sz));
    std::vector<uint8_t> dst(sz + 1, 0xEE);
    // Both directions at once.
    auto src2 = pattern(sz, static_cast<uint32_t>(sz) + 7);
    std::vector<uint8_t> dst2(sz, 0);
    SendRequest s1, s2;
    RecvRequest r1, r2;
    s1.data = src.data(), s1.bytes = sz, s1.env = env(sz, sz);
    r1.dst = dst.data(), r1.bytes = sz, r1.expect = env(sz, sz);
    s2.data = src2.data(), s2.bytes = sz, s2.env = env(sz, 1);
    r2.dst = dst2.data(), r2.bytes = sz, r2.expect = env(sz, 1);
    p.b->post_recv(&r1);
    p.a->post_send(&s1);
    p.b->post_send(&s2);
    p.a->post_recv(&r2);
    CHECK((p.a->has_pending() && p.b->has_pending()));
    CHECK(drive(p, [&] { return !s1.pending() && !r1.pending() && !s2.pending() && !r2.pending(); }));
    CHECK((s1.state == ReqState::kDone && r1.state == ReqState::kDone));
    CHECK((s2.state == ReqState::kDone && r2.state == ReqState::kDone));
    CHECK(((sz == 0 || std::memcmp(dst.data(), src.data(), sz) == 0) && dst[sz] == 0xEE));
    CHECK((sz == 0 || std::memcmp(dst2.data(), src2.data(), sz) == 0));  // memcmp(nullptr, .., 0) is UB
    CHECK((!p.a->has_pending() && !p.b->has_pending()));
    total += sz;
  }
  CHECK((p.a->counters().bytes_sent == total && p.b->counters().bytes_received == total));
  CHECK(p.a->counters().messages_sent == sizeof sizes / sizeof sizes[0]);
}

// Many messages in flight, mixed sizes (some striped), FIFO completion on both sides.
void test_fifo(int nsocks) {
  Pair p = make_pair(nsocks);
  const int kN = 300;
  std::vector<std::vector<uint8_t>> src(kN), dst(kN);
  std::vector<SendRequest> sends(kN);
  std::vector<RecvRequest> recvs(kN);
  for (int i = 0; i < kN; ++i) {
    size_t sz = i % 50 == 0 ? (300 << 10) + i : (i * 37) % 5000;
    src[i] = pattern(sz, i);
    dst[i].assign(sz, 0);
    sends[i].data = src[i].data(), sends[i].bytes = sz, sends[i].env = env(i, sz);
    recvs[i].dst = dst[i].data(), recvs[i].bytes = sz, recvs[i].expect = env(i, sz);
    // Half of the receives are posted before the sends, the rest trickle in later.
    if (i < kN / 2) p.b->post_recv(&recvs[i]);
    p.a->post_send(&sends[i]);
  }
  int posted = kN / 2;
  bool ordered = true;
  CHECK(drive(p, [&] {
    if (posted < kN) p.b->post_recv(&recvs[posted++]);
    for (int i = 1; i < kN; ++i) {
      ordered &= !(recvs[i].state == ReqState::kDone && recvs[i - 1].pending());
      ordered &= !(sends[i].state == ReqState::kDone && sends[i - 1].pending());
    }
    return !recvs[kN - 1].pending() && !sends[kN - 1].pending();
  }));
  REQUIRE(ordered);
  for (int i = 0; i < kN; ++i) {
    CHECK(recvs[i].state == ReqState::kDone);
    CHECK(dst[i] == src[i]);
  }
}

// A message that arrived before its receive was posted (stalled socket, masked EPOLLIN).
TEST_CASE("a receive posted late; wait_fd turns readable") {
  Pair p = make_pair(2);
  pollfd pf{p.b->wait_fd(), POLLIN, 0};
  REQUIRE(pf.fd >= 0);
  CHECK(poll(&pf, 1, 0) == 0);  // idle: the engine may sleep
  std::vector<uint8_t> src = pattern(1000, 3), dst(1000);
  SendRequest s;
  s.data = src.data(), s.bytes = src.size(), s.env = env(1, 1000);
  p.a->post_send(&s);
  for (double t = now_s(); s.pending() && now_s() < t + 5;) p.a->progress();  // only the sender
  CHECK(s.state == ReqState::kDone);
  CHECK(poll(&pf, 1, 1000) == 1);  // data arrived: wake up
  for (int i = 0; i < 100; ++i) p.b->progress();
  CHECK(poll(&pf, 1, 0) == 0);  // stalled on an unposted receive: quiet again, no spinning
  RecvRequest r;
  r.dst = dst.data(), r.bytes = dst.size(), r.expect = env(1, 1000);
  p.b->post_recv(&r);
  CHECK(drive(p, [&] { return !r.pending(); }));
  CHECK((r.state == ReqState::kDone && dst == src));
}

template <class T>
void run_reduce(Pair& p, size_t count, DataType dt, RedOp op, bool separate_acc, uint64_t seq,
                const std::function<T(size_t)>& in, const std::function<T(size_t)>& mine,
                const std::function<T(T, T)>& combine) {
  std::vector<T> src(count), dst(count), acc(count);
  for (size_t i = 0; i < count; ++i) {
    src[i] = in(i);
    (separate_acc ? acc : dst)[i] = mine(i);
    if (separate_acc) dst[i] = T(-1);
  }
  SendRequest s;
  RecvRequest r;
  s.data = src.data(), s.bytes = count * sizeof(T), s.env = env(seq, count);
  r.dst = dst.data(), r.bytes = count * sizeof(T), r.expect = env(seq, count);
  r.reduce = true, r.dtype = dt, r.op = op, r.acc = separate_acc ? acc.data() : nullptr;
  p.a->post_send(&s);
  p.b->post_recv(&r);
  CHECK(drive(p, [&] { return !s.pending() && !r.pending(); }));
  REQUIRE_OK(r.error);
  for (size_t i = 0; i < count; ++i) {
    if (dst[i] != combine(mine(i), in(i))) {
      std::fprintf(stderr, "reduce mismatch at %zu of %zu\n", i, count);
      REQUIRE(false);
    }
  }
}

TEST_CASE("fused reduce receives") {
  Pair p = make_pair(2);
  uint64_t seq = 0;
  for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1000), size_t(100003), size_t(3 << 20) + 1}) {
    run_reduce<float>(p, count, DataType::kFloat32, RedOp::kSum, false, seq++,
                      [](size_t i) { return float(i % 1000); }, [](size_t i) { return float(i % 7) * 0.5f; },
                      [](float a, float b) { return a + b; });
    run_reduce<float>(p, count, DataType::kFloat32, RedOp::kSum, true, seq++,
                      [](size_t i) { return 1.0f; }, [](size_t i) { return float(i % 5); },
                      [](float a, float b) { return a + b; });
    run_reduce<int32_t>(p, count, DataType::kInt32, RedOp::kMax, false, seq++,
                        [](size_t i) { return int32_t(i * 7919 % 1001) - 500; },
                        [](size_t i) { return int32_t(i * 104729 % 997) - 498; },
                        [](int32_t a, int32_t b) { return a > b ? a : b; });
  }
}

TEST_CASE("mismatched envelope or size -> kMismatch") {
  {  // different collective / op_seq
    Pair p = make_pair(2);
    std::vector<uint8_t> buf(64);
    SendRequest s;
    RecvRequest r;
    s.data = buf.data(), s.bytes = 64, s.env = env(12, 16, /*coll=*/1);
    r.dst = buf.data(), r.bytes = 64, r.expect = env(13, 16, /*coll=*/2);
    p.a->post_send(&s);
    p.b->post_recv(&r);
    CHECK(drive(p, [&] { return !r.pending(); }, 5));
    CHECK((r.state == ReqState::kFailed && r.error.code() == Code::kMismatch));
    const std::string& m = r.error.message();
    std::printf("  mismatch message: %s\n", m.c_str());
    CHECK(m.find(envelope_to_string(s.env)) != std::string::npos);
    CHECK(m.find(envelope_to_string(r.expect)) != std::string::npos);
    CHECK(r.error.peer() == 0);
    RecvRequest later;
    p.b->post_recv(&later);  // the endpoint is dead now: fails at once
    CHECK(later.state == ReqState::kFailed);
  }
  {  // same call, different size
    Pair p = make_pair(1);
    std::vector<uint8_t> buf(100);
    SendRequest s;
    RecvRequest r;
    s.data = buf.data(), s.bytes = 100, s.env = env(1, 25);
    r.dst = buf.data(), r.bytes = 96, r.expect = env(1, 25);
    p.a->post_send(&s);
    p.b->post_recv(&r);
    CHECK(drive(p, [&] { return !r.pending(); }, 5));
    CHECK(r.error.code() == Code::kMismatch);
    CHECK(r.error.message().find("100 bytes") != std::string::npos);
    CHECK(r.error.message().find("96 bytes") != std::string::npos);
  }
  {  // same call and size, another algorithm: ranks that chose differently (2 ranks, ring and rhd
     // exchange the same halves; taken as its own, the blocks were combined wrongly)
    Pair p = make_pair(1);
    std::vector<uint8_t> buf(64);
    SendRequest s;
    RecvRequest r;
    s.data = buf.data(), s.bytes = 64, s.env = env(3, 16);
    s.env.algo = static_cast<uint8_t>(Algorithm::kHalvingDoubling);
    r.dst = buf.data(), r.bytes = 64, r.expect = env(3, 16);
    r.expect.algo = static_cast<uint8_t>(Algorithm::kRing);
    p.a->post_send(&s);
    p.b->post_recv(&r);
    CHECK(drive(p, [&] { return !r.pending(); }, 5));
    CHECK(r.error.code() == Code::kMismatch);
    const std::string& m = r.error.message();
    CHECK(m.find("rhd") != std::string::npos);
    CHECK(m.find("ring") != std::string::npos);
    CHECK(m.find("chose different algorithms") != std::string::npos);
  }
}

TEST_CASE("garbage on the stream -> kRemoteError") {
  auto t = make_tcp_transport(1);
  std::vector<int> fa, fb;
  socket_pairs(1, &fa, &fb);
  std::string answer;
  auto eb = t->accept(peer_ctx(1, 0), "tcp1", &answer, fb);
  REQUIRE_OK(eb.status());
  std::unique_ptr<Endpoint> b(eb.value());
  std::vector<uint8_t> dst(16);
  RecvRequest r;
  r.dst = dst.data(), r.bytes = 16;
  b->post_recv(&r);
  std::string junk(200, 'x');
  REQUIRE_OK(send_all(fa[0], junk.data(), junk.size(), now_s() + 1));
  double deadline = now_s() + 5;
  while (r.pending() && now_s() < deadline) b->progress();
  CHECK(r.error.code() == Code::kRemoteError);
  CHECK(r.error.message().find("rank 0") != std::string::npos);
  CHECK(r.error.message().find("garbage") != std::string::npos);
  close(fa[0]);
  // A wrong protocol version is refused before any byte moves.
  std::vector<int> fc, fd;
  socket_pairs(1, &fc, &fd);
  auto bad = t->accept(peer_ctx(1, 0), "tcp9", &answer, fd);
  CHECK((!bad.ok() && bad.status().code() == Code::kNotSupported));
  close(fc[0]);
}

TEST_CASE("peer close, between and during messages") {
  // Receiver goes away in the middle of a 64 MiB send: the send fails promptly.
  {
    Pair p = make_pair(2);
    std::vector<uint8_t> src(64 << 20, 1), dst(64 << 20);
    SendRequest s;
    RecvRequest r;
    s.data = src.data(), s.bytes = src.size();
    r.dst = dst.data(), r.bytes = dst.size();
    p.a->post_send(&s);
    p.b->post_recv(&r);
    CHECK(drive(p, [&] { return p.b->counters().bytes_received > 0 || dst[dst.size() / 4] != 0 || dst[0] != 0; }, 10));
    p.b.reset();
    double t0 = now_s();
    CHECK(drive(p, [&] { return !s.pending(); }, 10));
    std::printf("  send failed %.3f s after the receiver closed: %s\n", now_s() - t0, s.error.to_string().c_str());
    CHECK((s.error.code() == Code::kRemoteError && s.error.peer() == 1));
    CHECK(s.error.message().find("closed the connection") != std::string::npos);
    SendRequest later;
    p.a->post_send(&later);
    CHECK(later.state == ReqState::kFailed);
  }
  // Sender goes away in the middle: the receive fails promptly.
  {
    Pair p = make_pair(2);
    std::vector<uint8_t> src(64 << 20, 1), dst(64 << 20);
    SendRequest s;
    RecvRequest r, r2;
    s.data = src.data(), s.bytes = src.size();
    r.dst = dst.data(), r.bytes = dst.size();
    p.a->post_send(&s);
    p.b->post_recv(&r);
    p.b->post_recv(&r2);
    CHECK(drive(p, [&] { return dst[0] != 0; }, 10));
    p.a.reset();
    CHECK(drive(p, [&] { return !r.pending() && !r2.pending(); }, 10));
    CHECK((r.error.code() == Code::kRemoteError && r2.error.code() == Code::kRemoteError));
    CHECK(r.error.peer() == 0);
  }
  // Idle peer closes: the next post fails at once; a receive posted before fails too.
  {
    Pair p = make_pair(2);
    RecvRequest r;
    p.a->post_recv(&r);
    p.b.reset();
    CHECK(drive(p, [&] { return !r.pending(); }, 5));
    CHECK(r.error.code() == Code::kRemoteError);
    SendRequest s;
    p.a->post_send(&s);
    CHECK(s.state == ReqState::kFailed);
    pollfd pf{p.a->wait_fd(), POLLIN, 0};
    CHECK(poll(&pf, 1, 0) == 0);  // a dead endpoint does not keep the engine awake
  }
}

TEST_CASE("fail_all fails everything locally; the peer learns") {
  Pair p = make_pair(2);
  RecvRequest r;
  SendRequest s;
  std::vector<uint8_t> big(64 << 20);  // larger than the socket buffers: still pending
  s.data = big.data(), s.bytes = big.size();
  p.a->post_recv(&r);
  p.a->post_send(&s);
  p.a->progress();
  p.a->fail_all(Status(Code::kAborted, "abort() called"));
  CHECK((r.error.code() == Code::kAborted && s.error.code() == Code::kAborted));
  CHECK(!p.a->has_pending());
  RecvRequest later;
  p.a->post_recv(&later);
  CHECK(later.error.code() == Code::kAborted);
  // The peer learns at once (sockets shut down) instead of waiting for a timeout.
  std::vector<uint8_t> sink(big.size());
  RecvRequest rb;  // matches the send that a aborted half way
  rb.dst = sink.data(), rb.bytes = sink.size();
  p.b->post_recv(&rb);
  CHECK(drive(p, [&] { return !rb.pending(); }, 5));
  CHECK(rb.error.code() == Code::kRemoteError);
}

// A failing endpoint's abort frame carries its root cause to the peer: read in line after the
// last message, and found behind a part the peer never posted a receive for (the peer reads
// through the rest of the stream once the connection is gone).
TEST_CASE("the abort frame carries the root cause") {
  const std::string kCause = "all_reduce #3: rank 7 (host z) closed the connection";
  const std::string kExpect = "failed and closed the connection; root cause: " + kCause;
  {  // in line: b is waiting for a message that will never come
    Pair p = make_pair(2);
    std::vector<uint8_t> buf(100);
    RecvRequest r;
    r.dst = buf.data(), r.bytes = buf.size(), r.expect = env(1, 25);
    p.b->post_recv(&r);
    p.a->fail_all(Status(Code::kAborted, kCause));
    CHECK(drive(p, [&] { return !r.pending(); }, 5));
    std::printf("  in line: %s\n", r.error.to_string().c_str());
    CHECK((r.error.code() == Code::kRemoteError && r.error.peer() == 0));
    CHECK(r.error.message().find(kExpect) != std::string::npos);
  }
  {  // behind an unreceived 1 MiB message: b's socket is stalled when a goes away
    Pair p = make_pair(1);
    std::vector<uint8_t> big(1 << 20, 7);
    SendRequest s;
    s.data = big.data(), s.bytes = big.size(), s.env = env(1, big.size() / 4);
    p.a->post_send(&s);
    CHECK(drive(p, [&] { return !s.pending(); }, 5));
    CHECK(s.state == ReqState::kDone);
    p.a->fail_all(Status(Code::kAborted, kCause));
    p.a.reset();
    // b learns when its own bytes meet the closed socket (a reset; the stalled socket is not
    // being read): a send, then the next post finds the endpoint dead.
    std::vector<uint8_t> small(8);
    SendRequest hello, probe;
    hello.data = probe.data = small.data(), hello.bytes = probe.bytes = small.size();
    hello.env = probe.env = env(2, 2);
    p.b->post_send(&hello);
    const double until = now_s() + 1;
    while (now_s() < until) p.b->progress();
    p.b->post_send(&probe);
    const Status& got = hello.state == ReqState::kFailed ? hello.error : probe.error;
    std::printf("  behind a stalled part: %s\n", got.to_string().c_str());
    CHECK(got.code() == Code::kRemoteError);
    CHECK(got.message().find(kExpect) != std::string::npos);
    p.b.reset();
  }
}

// Hand-crafted wire bytes trickled 3 bytes at a time: headers split across reads, reduce
// chunks that end inside an element (the carry), and the parts of one message arriving in
// reverse order on one socket.
TEST_CASE("a peer that trickles bytes") {
  auto t = make_tcp_transport(1);
  std::vector<int> fa, fb;
  socket_pairs(1, &fa, &fb);
  std::string answer;
  std::unique_ptr<Endpoint> b(t->accept(peer_ctx(1, 0), "tcp1", &answer, fb).value());
  const size_t kCount = 2048 + 3;  // floats; two parts: [4096, end) first, then [0, 4096)
  std::vector<float> in(kCount), dst(kCount);
  for (size_t i = 0; i < kCount; ++i) in[i] = float(i), dst[i] = 0.25f;
  RecvRequest r;
  r.dst = dst.data(), r.bytes = kCount * 4, r.expect = env(9, kCount);
  r.reduce = true, r.dtype = DataType::kFloat32, r.op = RedOp::kSum;
  b->post_recv(&r);
  std::string wire;
  for (int part : {1, 0}) {
    tcp::PartHeader h;
    h.part_count = 2;
    h.msg_seq = 0;
    h.env = env(9, kCount);
    h.total_bytes = kCount * 4;
    h.part_offset = part ? 4096 : 0;
    h.part_bytes = part ? kCount * 4 - 4096 : 4096;
    wire.append(reinterpret_cast<const char*>(&h), sizeof h);
    wire.append(reinterpret_cast<const char*>(in.data()) + h.part_offset, h.part_bytes);
  }
  for (size_t off = 0; off < wire.size(); off += 3) {
    REQUIRE_OK(send_all(fa[0], wire.data() + off, std::min<size_t>(3, wire.size() - off), now_s() + 1));
    for (int i = 0; i < 3; ++i) b->progress();
  }
  double deadline = now_s() + 5;
  while (r.pending() && now_s() < deadline) b->progress();
  REQUIRE_OK(r.error);
  CHECK(r.state == ReqState::kDone);
  CHECK(uccl_test::count_wrong(kCount, [&](size_t i) { return dst[i] == float(i) + 0.25f; }) == 0);
  close(fa[0]);
}

TEST_CASE("sizes 0 .. 64 MiB, 1-3 sockets") {
  for (int n : {1, 2, 3}) {
    CAPTURE(n);
    test_sizes(n);
  }
}

TEST_CASE("sockets striped over networks of different rates: exact data, weighted parts") {
  test_sizes(2, {10, 30});
  test_sizes(3, {25, 0});  // an unknown rate weighs like the fastest known
  test_sizes(4, {10, 10});
}

TEST_CASE("weighted_parts: shares follow the weights, 4 KiB cuts, nothing lost") {
  using uccl::weighted_parts;
  auto parts = weighted_parts(1 << 20, {1, 3}, 0);
  REQUIRE(parts.size() == 2);
  CHECK((parts[0].socket == 0 && parts[0].offset == 0 && parts[0].bytes == (256 << 10)));
  CHECK((parts[1].socket == 1 && parts[1].offset == (256 << 10) && parts[1].bytes == (768 << 10)));
  parts = weighted_parts((1 << 20) + 5, {1, 3}, 1);  // starts at socket 1
  REQUIRE(parts.size() == 2);
  CHECK((parts[0].socket == 1 && parts[0].bytes == (768 << 10)));
  CHECK((parts[1].socket == 0 && parts[1].offset == (768 << 10) && parts[1].bytes == (256 << 10) + 5));
  for (size_t bytes : {size_t{4097}, size_t{10000}, size_t{1} << 20, (size_t{3} << 20) + 11}) {
    for (size_t first : {0, 1, 2}) {
      auto ps = weighted_parts(bytes, {2, 1, 5}, first);
      size_t at = 0;
      for (auto& p : ps) {
        CHECK(p.offset == at);
        CHECK(p.bytes > 0);
        CHECK(p.socket < 3);
        at += p.bytes;
      }
      CHECK(at == bytes);
    }
  }
}

TEST_CASE("least_committed_lane: the least loaded lane below its own limit") {
  using uccl::least_committed_lane;
  CHECK(least_committed_lane({5, 3, 9}, {10, 10, 10}) == 1);
  CHECK(least_committed_lane({5, 3, 9}, {10, 2, 10}) == 0);  // lane 1 holds its limit
  CHECK(least_committed_lane({0, 0}, {1, 1}) == 0);          // a tie goes to the first
  CHECK(least_committed_lane({10, 12}, {10, 12}) == SIZE_MAX);
  CHECK(least_committed_lane({}, {}) == SIZE_MAX);
}

// Adaptive striping queues a large message's chunks until sockets drain, and messages posted
// after it (small ones too, whose socket is fixed) queue behind them, so no socket carries a
// later message in front of an earlier one's chunk. Here the receiver posts each receive only
// after the previous one completed (as phases do): a socket that carried a small message ahead
// of a chunk would stall on it forever.
TEST_CASE("striped chunks and later small messages keep each socket in message order") {
  Pair p = make_pair(3);
  const int kN = 12;
  std::vector<std::vector<uint8_t>> src(kN), dst(kN);
  std::vector<SendRequest> sends(kN);
  std::vector<RecvRequest> recvs(kN);
  for (int i = 0; i < kN; ++i) {
    const size_t sz = i % 4 == 0 ? (24u << 20) + 4096 * i + 7 : 100 + i;
    src[i] = pattern(sz, i);
    dst[i].assign(sz, 0);
    sends[i].data = src[i].data(), sends[i].bytes = sz, sends[i].env = env(i, sz);
    recvs[i].dst = dst[i].data(), recvs[i].bytes = sz, recvs[i].expect = env(i, sz);
    p.a->post_send(&sends[i]);
  }
  int posted = 0;
  CHECK(drive(p, [&] {
    if (posted < kN && (posted == 0 || !recvs[posted - 1].pending())) p.b->post_recv(&recvs[posted++]);
    return posted == kN && !recvs[kN - 1].pending() && !sends[kN - 1].pending();
  }));
  for (int i = 0; i < kN; ++i) {
    CAPTURE(i);
    REQUIRE_OK(recvs[i].error);
    CHECK(dst[i] == src[i]);
  }
}

TEST_CASE("FIFO completion, 1 and 2 sockets") {
  test_fifo(1);
  test_fifo(2);
}

}  // namespace
