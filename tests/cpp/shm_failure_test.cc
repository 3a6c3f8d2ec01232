// Failure behaviour of the shm transport: mismatches, a peer that exits or is SIGKILLed in the
// middle of a transfer, a peer that sends and exits, fail_all(), setup errors, and /dev/shm
// left clean in every case.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>

#include "shm_test_util.h"

using namespace shmtest;

namespace {

// A write to a peer that is gone must fail with EPIPE, not kill the test.
const bool sigpipe_ignored = [] {
  signal(SIGPIPE, SIG_IGN);
  return true;
}();

constexpr size_t kBig = 64u << 20;

// Waits for `r` and returns how long it took.
double wait_failed(Endpoint* ep, Request* r, Code expect, double limit_s) {
  const double t0 = now_s();
  Status s = drive(ep, {r}, limit_s + 5);
  const double dt = now_s() - t0;
  if (s.code() != expect) std::fprintf(stderr, "got %s\n", s.to_string().c_str());
  CHECK(s.code() == expect);
  CHECK(r->state == ReqState::kFailed);
  return dt;
}

TEST_CASE("mismatch") {
  for (int variant = 0; variant < 2; ++variant) {
    auto body = [&](Endpoint* ep) -> int {
      std::vector<uint8_t> p(100, 1);
      SendRequest s;
      s.data = p.data();
      s.bytes = 100;
      s.env = env_for(variant == 0 ? 8 : 7);  // variant 0: another op; variant 1: another size
      ep->post_send(&s);
      REQUIRE_OK(drive(ep, {&s}));
      // The parent detects the mismatch and shuts the connection: our next receive fails.
      RecvRequest r;
      std::vector<uint8_t> buf(10);
      r.dst = buf.data();
      r.bytes = 10;
      r.expect = env_for(1);
      ep->post_recv(&r);
      Status st = drive(ep, {&r}, 5);
      REQUIRE(st.code() == Code::kRemoteError);
      REQUIRE(st.message().find("mismatch") != std::string::npos);
      return 0;
    };
    std::unique_ptr<Endpoint> ep;
    pid_t child = fork_pair(options(true), options(true), &ep, body);
    std::vector<uint8_t> buf(100);
    RecvRequest r;
    r.dst = buf.data();
    r.bytes = variant == 0 ? 100 : 99;
    r.expect = env_for(7);
    ep->post_recv(&r);
    Status st = drive(ep.get(), {&r}, 10);
    std::printf("  %s\n", st.to_string().c_str());
    CHECK(st.code() == Code::kMismatch);
    CHECK(st.peer() == 1);
    SendRequest later;  // the endpoint is dead now: posts fail at once
    ep->post_send(&later);
    CHECK((later.state == ReqState::kFailed && later.error.code() == Code::kMismatch));
    CHECK(join(child) == 0);
  }
}

// The child receives a little of a large ring transfer, then dies (_exit or SIGKILL).
// The parent's send is blocked on a full ring and must fail within about a second.
void test_receiver_dies(bool sigkill) {
  auto body = [&](Endpoint* ep) -> int {
    std::vector<uint8_t> buf(kBig);
    RecvRequest r;
    r.dst = buf.data();
    r.bytes = kBig;
    r.expect = env_for(1);
    ep->post_recv(&r);
    ep->progress();  // moves at most 64 pieces: a few MiB of the 64
    REQUIRE(r.pending());
    if (sigkill) raise(SIGKILL);
    _exit(0);
  };
  std::unique_ptr<Endpoint> ep;
  pid_t child = fork_pair(options(false), options(false), &ep, body);
  std::vector<uint8_t> p(kBig, 3);
  SendRequest s;
  s.data = p.data();
  s.bytes = kBig;
  s.env = env_for(1);
  ep->post_send(&s);
  const double dt = wait_failed(ep.get(), &s, Code::kRemoteError, 1.0);
  std::printf("  receiver %s: send failed after %.3f s: %s\n", sigkill ? "SIGKILLed" : "exited", dt,
              s.error.message().c_str());
  CHECK(dt < 1.5);
  CHECK(s.error.peer() == 1);
  SendRequest later;
  ep->post_send(&later);
  CHECK((later.state == ReqState::kFailed && later.error.code() == Code::kRemoteError));
  CHECK(join(child) == (sigkill ? 128 + SIGKILL : 0));
}

// The parent's CMA send waits for the child's ack; the child is SIGKILLed from outside.
TEST_CASE("a CMA sender waiting for a dead peer's ack") {
  auto body = [&](Endpoint* ep) -> int {
    pause();  // never receives
    return 0;
  };
  std::unique_ptr<Endpoint> ep;
  pid_t child = fork_pair(options(true), options(true), &ep, body);
  std::vector<uint8_t> p(kBig, 3);
  SendRequest s;
  s.data = p.data();
  s.bytes = kBig;
  s.env = env_for(1);
  ep->post_send(&s);
  for (int i = 0; i < 1000; ++i) ep->progress();
  CHECK(s.pending());
  kill(child, SIGKILL);
  const double dt = wait_failed(ep.get(), &s, Code::kRemoteError, 1.0);
  std::printf("  cma sender: failed %.3f s after the kill\n", dt);
  CHECK(dt < 1.0);
  CHECK(join(child) == 128 + SIGKILL);
}

// The child dies in the middle of sending; the parent's receive fails.
void test_sender_dies(bool cma) {
  auto body = [&](Endpoint* ep) -> int {
    std::vector<uint8_t> p(kBig, 5);
    SendRequest s;
    s.data = p.data();
    s.bytes = kBig;
    s.env = env_for(1);
    ep->post_send(&s);
    const double t0 = now_s();
    while (now_s() - t0 < 0.05) ep->progress();
    raise(SIGKILL);
    return 0;
  };
  std::unique_ptr<Endpoint> ep;
  pid_t child = fork_pair(options(cma), options(cma), &ep, body);
  std::vector<uint8_t> buf(kBig);
  RecvRequest r;
  r.dst = buf.data();
  r.bytes = kBig;
  r.expect = env_for(1);
  // Receive only once the child is dead: the ring holds part of the message (or, with CMA, a
  // descriptor pointing into the dead process).
  usleep(200000);
  ep->post_recv(&r);
  const double dt = wait_failed(ep.get(), &r, Code::kRemoteError, 1.0);
  std::printf("  sender died (cma=%d): receive failed after %.3f s: %s\n", cma, dt, r.error.message().c_str());
  CHECK(join(child) == 128 + SIGKILL);
}

// The peer forks a child (think DataLoader worker) that inherits the liveness socket and
// outlives it. The socket stays open, so the peer's death must be seen through its pidfd.
TEST_CASE("the peer dies but its fork holds the socket") {
  auto body = [&](Endpoint* ep) -> int {
    RecvRequest go;  // setup is over on both sides
    go.expect = env_for(0);
    ep->post_recv(&go);
    REQUIRE_OK(drive(ep, {&go}));
    pid_t grandchild = fork();
    if (grandchild == 0) {
      close(1);  // let ctest's output pipe close when the test ends
      close(2);
      sleep(3);
      _exit(0);
    }
    _exit(0);
  };
  std::unique_ptr<Endpoint> ep;
  pid_t child = fork_pair(options(false), options(false), &ep, body);
  SendRequest go;
  go.env = env_for(0);
  ep->post_send(&go);
  REQUIRE_OK(drive(ep.get(), {&go}));
  std::vector<uint8_t> buf(10);
  RecvRequest r;
  r.dst = buf.data();
  r.bytes = 10;
  r.expect = env_for(1);
  ep->post_recv(&r);
  const double dt = wait_failed(ep.get(), &r, Code::kRemoteError, 1.0);
  std::printf("  peer exited, its fork holds the socket: receive failed after %.3f s\n", dt);
  CHECK(dt < 1.5);
  CHECK(join(child) == 0);
}

// Completed sends stay deliverable after the sender exits (a rank may send and leave).
TEST_CASE("send, then exit: completed sends stay deliverable") {
  auto body = [&](Endpoint* ep) -> int {
    for (int k = 0; k < 3; ++k) {
      std::vector<uint8_t> p = make_payload(1000 + k, k);
      SendRequest s;
      s.data = p.data();
      s.bytes = p.size();
      s.env = env_for(k);
      ep->post_send(&s);
      REQUIRE_OK(drive(ep, {&s}));
    }
    return 0;  // endpoint destroyed, process exits
  };
  std::unique_ptr<Endpoint> ep;
  pid_t child = fork_pair(options(true), options(true), &ep, body);
  CHECK(join(child) == 0);
  // Make sure the endpoint notices the closed socket before the receives are posted.
  RecvRequest probe;
  std::vector<uint8_t> first(1000);
  probe.dst = first.data();
  probe.bytes = 1000;
  probe.expect = env_for(0);
  ep->post_recv(&probe);
  REQUIRE_OK(drive(ep.get(), {&probe}));
  CHECK(check_payload(first.data(), 1000, 0));
  usleep(10000);
  ep->progress();
  for (int k = 1; k < 3; ++k) {
    std::vector<uint8_t> buf(1000 + k);
    RecvRequest r;
    r.dst = buf.data();
    r.bytes = buf.size();
    r.expect = env_for(k);
    ep->post_recv(&r);
    REQUIRE_OK(drive(ep.get(), {&r}));
    CHECK(check_payload(buf.data(), buf.size(), k));
  }
  RecvRequest more;  // nothing else is coming
  std::vector<uint8_t> buf(8);
  more.dst = buf.data();
  more.bytes = 8;
  more.expect = env_for(3);
  ep->post_recv(&more);
  Status st = drive(ep.get(), {&more}, 3);
  std::printf("  after the sender left: %s\n", st.to_string().c_str());
  CHECK(st.code() == Code::kRemoteError);
  CHECK(st.message().find("closed its endpoint") != std::string::npos);
}

// fail_all(): local requests fail with the given status at once, later posts too, and the
// peer's pending requests fail soon after with a RemoteError naming the reason.
TEST_CASE("fail_all") {
  auto body = [&](Endpoint* ep) -> int {
    std::vector<uint8_t> buf(kBig);
    RecvRequest r;
    r.dst = buf.data();
    r.bytes = kBig;
    r.expect = env_for(1);
    ep->post_recv(&r);
    Status st = drive(ep, {&r}, 10);
    REQUIRE(st.code() == Code::kRemoteError);
    REQUIRE(st.message().find("failed and closed the connection; root cause: test abort") != std::string::npos);
    return 0;
  };
  std::unique_ptr<Endpoint> ep;
  pid_t child = fork_pair(options(false), options(false), &ep, body);
  std::vector<uint8_t> buf(100), p(kBig, 1);
  RecvRequest r;
  r.dst = buf.data();
  r.bytes = 100;
  r.expect = env_for(2);
  SendRequest s;
  s.data = p.data();
  s.bytes = kBig;
  s.env = env_for(2);  // the child expects op 1: it must not get as far as a mismatch
  ep->post_recv(&r);
  CHECK(ep->has_pending());
  ep->fail_all(Status(Code::kAborted, "test abort"));
  CHECK(!ep->has_pending());
  CHECK((r.state == ReqState::kFailed && r.error.code() == Code::kAborted));
  ep->post_send(&s);
  CHECK((s.state == ReqState::kFailed && s.error.code() == Code::kAborted));
  CHECK(join(child) == 0);
}

// Setup failures: a segment that does not exist, and a connect that is abandoned.
TEST_CASE("setup errors") {
  auto t = make_shm_transport(options(true));
  {
    Result<PendingConnect*> pc = t->start_connect(peer_ctx(0, 1));
    REQUIRE_OK(pc.status());
    CHECK(leftover_segments() == 1);
    delete pc.value();  // never finished: the segment must not stay behind
    CHECK(leftover_segments() == 0);
  }
  int sv[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  std::string answer;
  Result<Endpoint*> ep = t->accept(peer_ctx(1, 0),
                                   "uccl-shm 1 name=/uccl-1-doesnotexist total=" + std::to_string(4096 + 2 * 65536) +
                                       " ring=65536 pid=1 cma=0",
                                   &answer, {sv[0]});
  CHECK((!ep.ok() && ep.status().code() == Code::kNotSupported));
  ep = t->accept(peer_ctx(1, 0), "garbage", &answer, {sv[1]});
  CHECK((!ep.ok() && ep.status().code() == Code::kRemoteError));
}

// A creator that died between start_connect() and the peer's open leaves its name behind; the
// next process to connect (or to see a peer fail) removes it, but never one whose creator still
// lives: a live creator holds the segment's lock, and an unlocked name with a live pid is left
// alone until it is older than min_age (the pid may have been reused since).
TEST_CASE("stale segment janitor") {
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  CHECK(join(dead) == 0);
  auto make = [](pid_t pid, const char* hex, int age_s) {
    std::string name = "/uccl-" + std::to_string(pid) + "-" + hex;
    int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    REQUIRE(fd >= 0);
    timespec times[2];
    clock_gettime(CLOCK_REALTIME, &times[0]);
    times[0].tv_sec -= age_s;
    times[1] = times[0];
    CHECK(futimens(fd, times) == 0);
    close(fd);
    return "/dev/shm" + name;
  };
  auto exists = [](const std::string& path) { return access(path.c_str(), F_OK) == 0; };
  const std::string stale = make(dead, "00000000000000aa", 120);
  const std::string dead_fresh = make(dead, "00000000000000bb", 0);
  const std::string alive = make(getppid(), "00000000000000cc", 0);
  const std::string reused = make(getppid(), "00000000000000dd", 120);
  // A live creator: a child that created a real segment and waits (its lock held).
  int pipefd[2];
  CHECK(pipe(pipefd) == 0);
  pid_t creator = fork();
  if (creator == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // a failed CHECK in the parent must not leave us behind
    Result<shm::Segment> seg = shm::Segment::create(64 << 10);
    if (!seg.ok()) _exit(3);
    const std::string name = seg.value().name();
    if (write(pipefd[1], name.c_str(), name.size()) != static_cast<ssize_t>(name.size())) _exit(4);
    pause();  // until SIGKILLed: the segment is never unlinked by us
    _exit(0);
  }
  close(pipefd[1]);  // a child that failed before writing ends the read
  char buf[128] = {0};
  CHECK(read(pipefd[0], buf, sizeof buf - 1) > 0);
  const std::string live = std::string("/dev/shm") + buf;
  CHECK(exists(live));
  CHECK(shm::remove_stale_segments(200) >= 2);  // stale, dead_fresh (and any real leftover)
  CHECK((!exists(stale) && !exists(dead_fresh)));
  CHECK((exists(alive) && exists(reused) && exists(live)));
  CHECK(shm::remove_stale_segments(200) == 0);
  CHECK((shm::remove_stale_segments(100) == 1 && !exists(reused)));  // old enough: pid reused
  CHECK(exists(live));  // locked: never, whatever its age
  kill(creator, SIGKILL);
  CHECK(join(creator) == 128 + SIGKILL);
  CHECK((shm::remove_stale_segments(60) == 1 && !exists(live)));  // the lock died with it
  CHECK(exists(alive));
  shm_unlink(alive.c_str() + 8);
  close(pipefd[0]);
}

TEST_CASE("receiver dies mid-transfer (exit, SIGKILL)") {
  test_receiver_dies(false);
  test_receiver_dies(true);
}

TEST_CASE("sender dies mid-transfer (ring, CMA)") {
  test_sender_dies(false);
  test_sender_dies(true);
}

TEST_CASE("no segment of this process is left in /dev/shm") { CHECK(leftover_segments() == 0); }

}  // namespace
