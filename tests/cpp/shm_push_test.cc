// CMA push of the shm transport across two processes: tee copies on every path, a receive that
// fails before or in the middle of a push (no byte may land in its buffer afterwards), and a
// mismatched offer (no push, the receiver reports the mismatch).
#include <unistd.h>

#include <atomic>

#include "shm_test_util.h"

using namespace shmtest;

namespace {

constexpr uint8_t kUntouched = 0xee;

bool all_bytes(const std::vector<uint8_t>& v, size_t from, uint8_t value) {
  for (size_t i = from; i < v.size(); ++i)
    if (v[i] != value) return false;
  return true;
}

// A send with a tee: the receiver gets the payload and the tee buffer holds the same bytes,
// whichever way the message went (push, pull, ring pieces, one inline ring message). Only an
// exchange step (duplex) is pushed; a one-way send is pulled so the receiver does the copy.
void test_tee(bool cma, bool push, bool duplex, size_t bytes, bool expect_push) {
  auto body = [&](Endpoint* ep) -> int {
    std::vector<uint8_t> in(bytes + 1, kUntouched);
    RecvRequest r;
    make_recv(&r, in.data(), bytes, env_for(1));
    ep->post_recv(&r);
    REQUIRE_OK(drive(ep, {&r}));
    REQUIRE(check_payload(in.data(), bytes, 1));
    REQUIRE(in[bytes] == kUntouched);
    return 0;
  };
  std::unique_ptr<Endpoint> ep;
  const ShmOptions o = options(cma, 4 << 20, push);
  pid_t child = fork_pair(o, o, &ep, body);
  CHECK(ep->takes_tee());
  std::vector<uint8_t> payload = make_payload(bytes, 1), tee(bytes + 1, kUntouched);
  SendRequest s;
  make_send(&s, payload.data(), bytes, env_for(1), duplex);
  s.tee = tee.data();
  ep->post_send(&s);
  REQUIRE_OK(drive(ep.get(), {&s}));
  CHECK(check_payload(tee.data(), bytes, 1));
  CHECK(tee[bytes] == kUntouched);
  const shm::ShmStats& st = as_shm(ep.get())->stats();
  std::printf("  %zu bytes, cma=%d push=%d duplex=%d: ring %llu, cma %llu, push %llu\n", bytes, cma, push, duplex,
              (unsigned long long)st.ring_sends, (unsigned long long)st.cma_sends, (unsigned long long)st.push_sends);
  CHECK(st.push_sends == (expect_push ? 1u : 0u));
  CHECK(join(child) == 0);
}

// The receiver posts a large receive (an offer), then fails. Either before the sender claims
// the offer (revoked: the sender falls back to a pull header that is never read) or while the
// sender pushes (the receiver asks it to stop and waits). After fail_all() returns, the buffer
// never changes again, and the sender's send fails with the receiver's root cause.
void test_fail_during_push(bool mid_push) {
  const size_t bytes = mid_push ? (256u << 20) : (8u << 20);
  auto body = [&](Endpoint* ep) -> int {
    std::vector<uint8_t> in(bytes, kUntouched);
    RecvRequest r;
    make_recv(&r, in.data(), bytes, env_for(1));
    ep->post_recv(&r);
    if (mid_push) {
      // The payload's first byte is pattern(0, 2) = 14, so the push has begun when it changes.
      const double deadline = now_s() + 30;
      while (reinterpret_cast<volatile uint8_t*>(in.data())[0] == kUntouched) REQUIRE(now_s() < deadline);
    }
    const double t0 = now_s();
    ep->fail_all(Status(Code::kAborted, "test abort"));
    REQUIRE(now_s() - t0 < 1.0);  // the writer stopped at a chunk boundary, not at the wait's bound
    REQUIRE(r.state == ReqState::kFailed);
    const std::vector<uint8_t> snapshot = in;
    usleep(300 * 1000);  // a sender that kept writing would change the buffer meanwhile
    REQUIRE(in == snapshot);
    if (mid_push) {
      REQUIRE(!all_bytes(in, 0, kUntouched));         // the push had started...
      REQUIRE(in.back() == kUntouched);               // ...and stopped before the end
    } else {
      REQUIRE(all_bytes(in, 0, kUntouched));
    }
    return 0;
  };
  std::unique_ptr<Endpoint> ep;
  pid_t child = fork_pair(options(true), options(true), &ep, body);
  std::vector<uint8_t> payload = make_payload(bytes, 2);
  SendRequest s;
  make_send(&s, payload.data(), bytes, env_for(1), true);
  if (!mid_push) usleep(100 * 1000);  // let the receiver post and fail first
  ep->post_send(&s);
  Status st = drive(ep.get(), {&s}, 20);
  std::printf("  %s: sender got %s\n", mid_push ? "mid-push" : "before the push", st.to_string().c_str());
  CHECK(!st.ok());
  CHECK(st.message().find("test abort") != std::string::npos);
  if (as_shm(ep.get())->cma_send_enabled()) CHECK(as_shm(ep.get())->stats().push_sends == 0);
  CHECK(join(child) == 0);
}

// An offer that does not fit the message (another size) is not used: no byte is written into
// the receiver's buffer, and the receiver reports the mismatch from the pull header.
TEST_CASE("mismatched offer") {
  const size_t want = 2u << 20, sent = 3u << 20;
  auto body = [&](Endpoint* ep) -> int {
    std::vector<uint8_t> in(want, kUntouched);
    RecvRequest r;
    make_recv(&r, in.data(), want, env_for(1));
    ep->post_recv(&r);
    Status st = drive(ep, {&r}, 10);
    REQUIRE(st.code() == Code::kMismatch);
    REQUIRE(all_bytes(in, 0, kUntouched));
    return 0;
  };
  std::unique_ptr<Endpoint> ep;
  pid_t child = fork_pair(options(true), options(true), &ep, body);
  std::vector<uint8_t> payload = make_payload(sent, 3);
  SendRequest s;
  make_send(&s, payload.data(), sent, env_for(1), true);
  ep->post_send(&s);
  Status st = drive(ep.get(), {&s}, 10);
  std::printf("  sender got %s\n", st.to_string().c_str());
  CHECK(!st.ok());
  CHECK(as_shm(ep.get())->stats().push_sends == 0);
  CHECK(join(child) == 0);
}

TEST_CASE("tee copies, pushed, pulled and through the ring") {
  test_tee(true, true, true, (4u << 20) + 3, true);    // pushed, chunk by chunk
  test_tee(true, true, true, (16u << 20) + 3, true);   // pushed, the tee copy streaming
  test_tee(true, true, false, (16u << 20) + 3, false); // pulled, the tee copy streaming
  test_tee(true, true, false, (4u << 20) + 3, false);  // one-way: pulled by the receiver
  test_tee(true, false, true, (4u << 20) + 3, false);  // push off: pulled
  test_tee(false, true, true, (1u << 20) + 5, false);  // ring pieces
  test_tee(false, true, true, 100, false);             // one inline ring message
}

// Final receives (RecvRequest::final) are offered from push_min_bytes, below cma_min_bytes, and
// a duplex send that expects one (SendRequest::to_final) pushes into it. Any disagreement, a
// one-way send or a size below push_min_bytes goes through the ring. A large pushed message
// follows on the same endpoint each time: an offer left open by a mid-size receive must not
// confuse the next message's claim.
void test_final(bool recv_final, bool send_final, bool duplex, size_t bytes, bool expect_push) {
  const size_t big = (2u << 20) + 7;
  auto body = [&](Endpoint* ep) -> int {
    std::vector<uint8_t> in(bytes + 1, kUntouched), in2(big);
    RecvRequest r, r2;
    make_recv(&r, in.data(), bytes, env_for(1));
    r.final = recv_final;
    make_recv(&r2, in2.data(), big, env_for(2));
    ep->post_recv(&r);
    ep->post_recv(&r2);
    REQUIRE_OK(drive(ep, {&r, &r2}));
    REQUIRE(check_payload(in.data(), bytes, 1));
    REQUIRE(in[bytes] == kUntouched);
    REQUIRE(check_payload(in2.data(), big, 2));
    return 0;
  };
  std::unique_ptr<Endpoint> ep;
  ShmOptions o = options(true);
  o.push_min_bytes = 16 << 10;
  pid_t child = fork_pair(o, o, &ep, body);
  std::vector<uint8_t> payload = make_payload(bytes, 1), payload2 = make_payload(big, 2);
  SendRequest s, s2;
  make_send(&s, payload.data(), bytes, env_for(1), duplex);
  s.to_final = send_final;
  make_send(&s2, payload2.data(), big, env_for(2), true);
  ep->post_send(&s);
  ep->post_send(&s2);
  REQUIRE_OK(drive(ep.get(), {&s, &s2}));
  const shm::ShmStats& st = as_shm(ep.get())->stats();
  std::printf("  %zu bytes, final recv=%d send=%d duplex=%d: ring %llu, cma %llu, push %llu\n", bytes, recv_final,
              send_final, duplex, (unsigned long long)st.ring_sends, (unsigned long long)st.cma_sends,
              (unsigned long long)st.push_sends);
  if (as_shm(ep.get())->cma_send_enabled()) {
    CHECK(st.push_sends == (expect_push ? 2u : 1u));
    CHECK(st.ring_sends == (expect_push ? 0u : 1u));
  }
  CHECK(join(child) == 0);
}

TEST_CASE("final receives are pushed from push_min_bytes") {
  test_final(true, true, true, (32u << 10) + 4, true);    // pushed
  test_final(true, true, true, 16u << 10, true);          // exactly the threshold
  test_final(true, true, true, (16u << 10) - 64, false);  // below it: ring
  test_final(false, true, true, 32u << 10, false);        // the receive made no offer: ring, no wait
  test_final(true, false, true, 32u << 10, false);        // the sender expects none: ring
  test_final(true, true, false, 32u << 10, false);        // one-way: ring
}

TEST_CASE("receiver fails before the push") { test_fail_during_push(false); }
TEST_CASE("receiver fails in the middle of a push") { test_fail_during_push(true); }

TEST_CASE("no segment of this process is left in /dev/shm") { CHECK(leftover_segments() == 0); }

}  // namespace
