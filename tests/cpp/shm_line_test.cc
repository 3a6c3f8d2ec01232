// One-line shm messages (kMsgLine, shm_line.h): payloads of 0..24 bytes written in the header's
// line and found by the reader through the line's seal. Mixed with ring, multi-piece and CMA
// messages over many laps of a small ring; a stale payload line forged to look like a sealed
// message at the reader's next position is never taken for one; peek() of a one-line message;
// a sender killed after its one-line sends. The sleeping reader woken by a one-line send is in
// shm_doorbell_test.cc.
#include <signal.h>

#include "shm_test_util.h"

using namespace shmtest;
using shm::kLine;
using shm::kLineBytes;

namespace {

constexpr size_t kRing = 16 << 10;  // the smallest ring with 4 KiB pieces: a lap every 256 lines

ShmOptions small_ring() {
  ShmOptions o = options(true, kRing);
  o.piece_bytes = 4 << 10;
  return o;
}

// Message k of the mixed stream: mostly one-line sizes, then one line more than fits, a few
// lines, several pieces (more than the ring) and CMA (pulled: the sends are not duplex).
size_t mixed_size(int k) {
  if (k % 97 == 11) return (1u << 20) + k;
  if (k % 31 == 5) return 3 * kRing + k;
  if (k % 7 == 3) return kLineBytes + 1 + k % 300;
  return k % (kLineBytes + 1);
}
constexpr int kMixed = 1500;
int mixed_lines() {
  int n = 0;
  for (int k = 0; k < kMixed; ++k) n += mixed_size(k) <= kLineBytes;
  return n;
}

// Both sides post the whole stream at once, both ways, and check every payload and that the
// one-line ones went as one line each way.
int exchange_mixed(Endpoint* ep, uint64_t my_seed, uint64_t peer_seed) {
  std::vector<std::vector<uint8_t>> out(kMixed), in(kMixed);
  std::vector<SendRequest> sends(kMixed);
  std::vector<RecvRequest> recvs(kMixed);
  std::vector<Request*> all;
  for (int k = 0; k < kMixed; ++k) {
    out[k] = make_payload(mixed_size(k), my_seed + k);
    in[k].assign(mixed_size(k) + 1, 0xee);
    make_send(&sends[k], out[k].data(), out[k].size(), env_for(7, static_cast<uint32_t>(k)));
    make_recv(&recvs[k], in[k].data(), mixed_size(k), env_for(7, static_cast<uint32_t>(k)));
    ep->post_send(&sends[k]);
    ep->post_recv(&recvs[k]);
    all.push_back(&sends[k]);
    all.push_back(&recvs[k]);
  }
  REQUIRE_OK(drive(ep, all));
  for (int k = 0; k < kMixed; ++k) {
    CAPTURE(k);
    REQUIRE(check_payload(in[k].data(), mixed_size(k), peer_seed + k));
    REQUIRE(in[k][mixed_size(k)] == 0xee);  // nothing written past the end
  }
  const shm::ShmStats& st = as_shm(ep)->stats();
  CHECK(st.line_sends == static_cast<uint64_t>(mixed_lines()));
  CHECK(st.line_recvs == static_cast<uint64_t>(mixed_lines()));
  CHECK(st.cma_sends + st.push_sends > 0);  // the stream really mixed the paths
  return 0;
}

// Payload whose every line is a sealed one-line header for the position it will be read at
// one lap later (line at `pos` read at pos + kRing as step `step_of(pos + kRing)`), carrying the
// envelope the reader will expect there: only PayloadLines keeps the reader from taking it (its
// receives would complete with 0xba.. before the sender sends).
std::vector<uint8_t> forged_payload(size_t bytes, uint64_t first_line_pos, uint32_t (*step_of)(uint64_t)) {
  std::vector<uint8_t> v(bytes, 0);
  for (size_t off = 0; off + kLine <= bytes; off += kLine) {
    shm::MsgHeader h{};
    const uint64_t next_lap = first_line_pos + off + kRing;
    h.env = env_for(8, step_of(next_lap));
    std::memset(shm::line_payload(&h), 0xba, 8);
    h.seal = shm::make_seal(next_lap, shm::kMsgLine, 8);
    std::memcpy(&v[off], &h, kLine);
  }
  return v;
}

}  // namespace

TEST_CASE("one-line messages mixed with ring, multi-piece and CMA ones over many laps") {
  std::unique_ptr<Endpoint> ep;
  pid_t child = fork_pair(small_ring(), small_ring(), &ep, [](Endpoint* e) { return exchange_mixed(e, 5000, 0); });
  CHECK(exchange_mixed(ep.get(), 0, 5000) == 0);
  CHECK(join(child) == 0);
}

TEST_CASE("a stale payload line that looks like a sealed message is not read as one") {
  // Message 0 (step 0) fills the first lap: header at 0, forged payload lines 64 .. kRing.
  // Then one-line messages, step 1 + i at kRing + 64 * i: the first on line 0 (a header last
  // lap: its seal is trusted), sent at once; the others on forged lines, sent only after the
  // reader has polled there for a while. A second batch goes on further into the forged lines.
  const size_t big = kRing - kLine;
  const int kSmall = 40;
  auto step_of = [](uint64_t pos) { return static_cast<uint32_t>((pos - kRing) / kLine + 1); };
  auto body = [&](Endpoint* ep) -> int {
    std::vector<uint8_t> in(big);
    RecvRequest r0;
    make_recv(&r0, in.data(), big, env_for(8, 0));
    ep->post_recv(&r0);
    REQUIRE_OK(drive(ep, {&r0}));
    std::vector<RecvRequest> rs(kSmall);
    std::vector<uint64_t> got(kSmall, 0);
    std::vector<Request*> all;
    for (int batch = 0; batch < 2; ++batch) {
      all.clear();
      for (int i = 0; i < kSmall; ++i) {
        make_recv(&rs[i], &got[i], 8, env_for(8, 1 + batch * kSmall + i));
        ep->post_recv(&rs[i]);
        all.push_back(&rs[i]);
      }
      if (batch == 0) {
        REQUIRE_OK(drive(ep, {&rs[0]}));
        for (int i = 0; i < 200; ++i) ep->progress();  // the sender waits: nothing else is there yet
        for (int i = 1; i < kSmall; ++i) REQUIRE(rs[i].pending());
      }
      REQUIRE_OK(drive(ep, all));
      for (int i = 0; i < kSmall; ++i) REQUIRE(got[i] == 1000u * (batch + 1) + i);
    }
    REQUIRE(as_shm(ep)->stats().line_recvs == static_cast<uint64_t>(2 * kSmall));
    return 0;
  };
  std::unique_ptr<Endpoint> ep;
  pid_t child = fork_pair(small_ring(), small_ring(), &ep, body);
  const std::vector<uint8_t> forged = forged_payload(big, kLine, step_of);
  SendRequest s0;
  make_send(&s0, forged.data(), big, env_for(8, 0));
  ep->post_send(&s0);
  REQUIRE_OK(drive(ep.get(), {&s0}));
  std::vector<uint64_t> vals(kSmall);
  std::vector<SendRequest> ss(kSmall);
  std::vector<Request*> all;
  for (int batch = 0; batch < 2; ++batch) {
    all.clear();
    for (int i = 0; i < kSmall; ++i) {
      vals[i] = 1000u * (batch + 1) + i;
      make_send(&ss[i], &vals[i], 8, env_for(8, 1 + batch * kSmall + i));
      ep->post_send(&ss[i]);
      all.push_back(&ss[i]);
      if (batch == 0 && i == 0) {
        REQUIRE_OK(drive(ep.get(), {&ss[0]}));
        usleep(200 * 1000);  // the receiver polls the first forged line meanwhile
      }
    }
    REQUIRE_OK(drive(ep.get(), all));
  }
  CHECK(join(child) == 0);
}

TEST_CASE("peek shows a one-line message, and a zero-byte one") {
  auto body = [](Endpoint* ep) -> int {
    usleep(50 * 1000);  // the parent peeks before anything is there
    uint8_t twelve[12];
    for (int i = 0; i < 12; ++i) twelve[i] = static_cast<uint8_t>(i + 1);
    SendRequest a, b;
    make_send(&a, twelve, sizeof twelve, env_for(3, 0, 3));
    make_send(&b, nullptr, 0, env_for(3, 1, 0));
    ep->post_send(&a);
    ep->post_send(&b);
    REQUIRE_OK(drive(ep, {&a, &b}));
    return 0;
  };
  std::unique_ptr<Endpoint> ep;
  pid_t child = fork_pair(options(true), options(true), &ep, body);
  for (size_t want : {size_t(12), size_t(0)}) {
    Envelope env;
    size_t bytes = 99;
    const double deadline = now_s() + 30;
    for (;;) {
      Result<bool> seen = ep->peek(&env, &bytes);
      REQUIRE_OK(seen.status());
      if (seen.value()) break;
      REQUIRE(now_s() < deadline);
    }
    CHECK(bytes == want);
    CHECK(env.op_seq == 3);
    CHECK(env.count == want / 4);
    uint8_t in[12] = {};
    RecvRequest r;
    make_recv(&r, in, bytes, env);
    ep->post_recv(&r);
    REQUIRE_OK(drive(ep.get(), {&r}));
    for (size_t i = 0; i < want; ++i) CHECK(in[i] == i + 1);
  }
  CHECK(as_shm(ep.get())->stats().line_recvs == 2);
  CHECK(join(child) == 0);
}

TEST_CASE("a sender killed after one-line sends: they arrive, then the peer is named") {
  auto body = [](Endpoint* ep) -> int {
    uint64_t v[3] = {11, 22, 33};
    SendRequest s[3];
    for (int k = 0; k < 3; ++k) {
      make_send(&s[k], &v[k], 8, env_for(k));
      ep->post_send(&s[k]);
    }
    REQUIRE_OK(drive(ep, {&s[0], &s[1], &s[2]}));
    raise(SIGKILL);  // no note, no ring: the socket closes with the process
    return 0;
  };
  std::unique_ptr<Endpoint> ep;
  pid_t child = fork_pair(options(true), options(true), &ep, body);
  CHECK(join(child) == 128 + SIGKILL);
  for (int k = 0; k < 3; ++k) {
    uint64_t got = 0;
    RecvRequest r;
    make_recv(&r, &got, 8, env_for(k));
    ep->post_recv(&r);
    REQUIRE_OK(drive(ep.get(), {&r}));
    CHECK(got == 11u * (k + 1));
  }
  uint64_t more = 0;
  RecvRequest r;
  make_recv(&r, &more, 8, env_for(3));
  ep->post_recv(&r);
  Status st = drive(ep.get(), {&r}, 10);
  std::printf("  after the sender was killed: %s\n", st.to_string().c_str());
  CHECK(st.code() == Code::kRemoteError);
  CHECK(st.peer() == 1);
}

TEST_CASE("no segment of this process is left in /dev/shm") { CHECK(leftover_segments() == 0); }
