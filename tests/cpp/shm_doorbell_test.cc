// Sleeping on the shm doorbell (core/idle_wait.h, Doorbell in shm_segment.h): a receiver that
// armed its doorbell and sleeps is woken by the peer's send, not by its (30 s) timeout; a sleep
// whose futex word already moved returns at once (no lost wake-up); a sleeper whose peer dies
// sees it on its next look. Two processes, like two ranks (shm_test_util.h's fork_pair).
#include "shm_test_util.h"

#include "core/idle_wait.h"

using namespace shmtest;

namespace {

constexpr double kLongSleep = 30;  // a wake-up by timeout would take this long

// Child: posts a receive, then sleeps on its doorbell until it completes. Exit code 0 when the
// message came and no sleep ran into its timeout.
int sleepy_receiver(Endpoint* ep, size_t bytes) {
  std::vector<uint8_t> in(bytes);
  RecvRequest r;
  make_recv(&r, in.data(), in.size(), env_for(1));
  ep->post_recv(&r);
  WaitSet ws;
  int sleeps = 0;
  while (r.pending()) {
    ws.clear();
    ep->arm_wait(&ws);
    if (ws.futexes.size() != 1) return 2;
    if (ep->progress() || !r.pending()) {
      ep->disarm_wait();
      continue;
    }
    const double t0 = now_s();
    idle_sleep(ws, kLongSleep);
    if (now_s() - t0 > kLongSleep / 2) return 3;  // slept through: nobody rang
    ep->disarm_wait();
    ++sleeps;
  }
  if (r.state != ReqState::kDone || !check_payload(in.data(), in.size(), 1)) return 4;
  return sleeps > 0 ? 0 : 5;  // 5: never slept (the parent is too early; not expected after 0.5 s)
}

}  // namespace

// 64 bytes: a header and a payload line, published by `head`; 8 bytes: one sealed line.
TEST_CASE("a sleeping receiver is woken by the peer's send") {
  for (size_t bytes : {size_t(64), size_t(8)}) {
    CAPTURE(bytes);
    std::unique_ptr<Endpoint> ep;
    const ShmOptions o = options(true);
    pid_t child = fork_pair(o, o, &ep, [bytes](Endpoint* e) { return sleepy_receiver(e, bytes); });
    usleep(500 * 1000);  // the child is asleep by now (it armed within microseconds)
    std::vector<uint8_t> payload = make_payload(bytes, 1);
    SendRequest s;
    make_send(&s, payload.data(), payload.size(), env_for(1));
    ep->post_send(&s);
    CHECK(drive(ep.get(), {&s}).ok());
    CHECK(join(child) == 0);
    CHECK(as_shm(ep.get())->stats().line_sends == (bytes <= shm::kLineBytes ? 1u : 0u));
  }
}

TEST_CASE("a sleeping receiver notices that its peer died") {
  std::unique_ptr<Endpoint> ep;
  const ShmOptions o = options(true);
  pid_t child = fork_pair(o, o, &ep, [](Endpoint*) -> int {
    usleep(300 * 1000);
    _exit(0);  // no note, no ring: as if killed
  });
  std::vector<uint8_t> in(64);
  RecvRequest r;
  make_recv(&r, in.data(), in.size(), env_for(1));
  ep->post_recv(&r);
  const double t0 = now_s();
  WaitSet ws;
  while (r.pending() && now_s() - t0 < 60) {
    ws.clear();
    ep->arm_wait(&ws);  // looks at the peer's liveness before it arms
    if (!ep->progress() && r.pending()) idle_sleep(ws, 0.01);
    ep->disarm_wait();
  }
  CHECK(r.state == ReqState::kFailed);
  CHECK(join(child) == 0);
}

TEST_CASE("a futex word that moved before the sleep ends it at once") {
  alignas(64) uint32_t word = 7;
  WaitSet ws;
  ws.futexes.push_back({&word, 6});  // armed at 6, bumped to 7 since: the ring was missed
  const double t0 = now_s();
  uccl::idle_sleep(ws, kLongSleep);
  CHECK(now_s() - t0 < kLongSleep / 2);
  uint32_t other = 1;
  ws.futexes.push_back({&other, 1});  // two words: futex_waitv (or its fallback)
  const double t1 = now_s();
  uccl::idle_sleep(ws, kLongSleep);
  CHECK(now_s() - t1 < kLongSleep / 2);
}
