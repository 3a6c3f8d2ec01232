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

// Alternate forms (RecvRequest::alt_dst, the staged endpoint's notes): every receive is a large
// plain one (offered for a push) that also takes a 48-byte "note" with mark 0xA5. The sender
// sends, per message, the bytes (duplex: pushed into the offer) or the note. A note lands in
// alt_dst and leaves the buffer untouched, a reducing receive does not reduce it, the offer it
// left open does not confuse the later pushes (the slots cycle twice), an unmarked message of
// the note's size is taken as bytes, and a marked one of neither size is a mismatch.
TEST_CASE("receives that take an alternate form") {
  constexpr uint8_t kMark = 0xA5;
  constexpr size_t kNote = 48, kMessages = 2 * shm::kPushOfferSlots + 3;
  const size_t big = (1u << 20) + 64;
  auto is_note = [](size_t i) { return i % 3 == 1; };
  auto body = [&](Endpoint* ep) -> int {
    REQUIRE(ep->takes_alternates());
    std::vector<std::vector<uint8_t>> in(kMessages, std::vector<uint8_t>(big, kUntouched));
    std::vector<std::vector<uint8_t>> notes(kMessages, std::vector<uint8_t>(kNote, 0));
    std::vector<RecvRequest> r(kMessages);
    std::vector<Request*> batch;
    for (size_t i = 0; i < kMessages; ++i) {
      make_recv(&r[i], in[i].data(), big, env_for(i + 1));
      if (i % 2 == 0) {  // reducing receives (uint8 sum onto 0xee bytes) for every other one
        r[i].reduce = true;
        r[i].dtype = DataType::kUint8;
      }
      r[i].alt_dst = notes[i].data();
      r[i].alt_bytes = kNote;
      r[i].alt_mark = kMark;
      ep->post_recv(&r[i]);
      batch.push_back(&r[i]);
      if (batch.size() == 4 || i + 1 == kMessages) {  // fewer ahead than offer slots: none is replaced
        REQUIRE_OK(drive(ep, batch));
        batch.clear();
      }
    }
    for (size_t i = 0; i < kMessages; ++i) {
      REQUIRE(r[i].took_alt == is_note(i));
      if (is_note(i)) {
        REQUIRE(check_payload(notes[i].data(), kNote, 100 + i));
        REQUIRE(all_bytes(in[i], 0, kUntouched));
      } else {
        std::vector<uint8_t> want = make_payload(big, i);
        if (r[i].reduce)
          for (auto& b : want) b = static_cast<uint8_t>(b + kUntouched);
        REQUIRE(in[i] == want);
      }
    }
    // An unmarked message of the note's size is the bytes; a marked one of another size fails.
    std::vector<uint8_t> small(kNote, kUntouched), note(kNote);
    RecvRequest plain, wrong;
    make_recv(&plain, small.data(), kNote, env_for(100));
    plain.alt_dst = note.data();
    plain.alt_bytes = kNote;
    plain.alt_mark = kMark;
    wrong = plain;
    wrong.expect = env_for(101);
    wrong.dst = in[0].data();
    wrong.bytes = 2 * kNote;
    ep->post_recv(&plain);
    REQUIRE_OK(drive(ep, {&plain}));
    REQUIRE(!plain.took_alt);
    REQUIRE(check_payload(small.data(), kNote, 7));
    ep->post_recv(&wrong);
    REQUIRE(drive(ep, {&wrong}, 10).code() == Code::kMismatch);
    return 0;
  };
  std::unique_ptr<Endpoint> ep;
  ShmOptions o = options(true);
  o.cma_min_bytes = 128 << 10;
  pid_t child = fork_pair(o, o, &ep, body);
  std::vector<std::vector<uint8_t>> payload(kMessages);
  std::vector<SendRequest> s(kMessages);
  std::vector<Request*> all;
  for (size_t i = 0; i < kMessages; ++i) {
    payload[i] = is_note(i) ? make_payload(kNote, 100 + i) : make_payload(big, i);
    Envelope e = env_for(i + 1);
    if (is_note(i)) e.mark = kMark;
    make_send(&s[i], payload[i].data(), payload[i].size(), e, true);
    ep->post_send(&s[i]);
    all.push_back(&s[i]);
  }
  REQUIRE_OK(drive(ep.get(), all));
  std::vector<uint8_t> small = make_payload(kNote, 7), marked = make_payload(kNote + 16, 8);
  SendRequest plain, wrong;
  make_send(&plain, small.data(), kNote, env_for(100));
  Envelope e = env_for(101);
  e.mark = kMark;
  make_send(&wrong, marked.data(), marked.size(), e);
  ep->post_send(&plain);
  ep->post_send(&wrong);
  drive(ep.get(), {&plain, &wrong}, 10);  // the second may fail once the receiver reported it
  const shm::ShmStats& st = as_shm(ep.get())->stats();
  std::printf("  alternate forms: ring %llu, cma %llu, push %llu\n", (unsigned long long)st.ring_sends,
              (unsigned long long)st.cma_sends, (unsigned long long)st.push_sends);
  // Pushed: the plain receives that do not reduce (reducing ones make no offer: pulled).
  size_t plain_copies = 0;
  for (size_t i = 0; i < kMessages; ++i) plain_copies += !is_note(i) && i % 2 == 1;
  if (as_shm(ep.get())->cma_send_enabled()) CHECK(st.push_sends == plain_copies);
  CHECK(join(child) == 0);
}

TEST_CASE("receiver fails before the push") { test_fail_during_push(false); }
TEST_CASE("receiver fails in the middle of a push") { test_fail_during_push(true); }

TEST_CASE("no segment of this process is left in /dev/shm") { CHECK(leftover_segments() == 0); }

}  // namespace
