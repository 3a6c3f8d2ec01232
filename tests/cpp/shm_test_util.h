// Helpers for the shm transport tests: two endpoints in two processes (fork), the way two
// ranks on one host see each other. The parent is the active side, the child the passive one.
//
// The core's role is played by a socketpair: the offer travels over it before accept(), the
// answer after (exactly as the core's hello/reply does), and then it becomes the liveness fd.
#pragma once

#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "endpoint_test_util.h"
#include "test_util.h"
#include "transports/shm/shm_endpoint.h"
#include "transports/shm/shm_transport.h"

namespace shmtest {

using namespace uccl;

inline void write_string(int fd, const std::string& s) {
  uint32_t n = static_cast<uint32_t>(s.size());
  CHECK(write(fd, &n, 4) == 4);
  CHECK(write(fd, s.data(), n) == static_cast<ssize_t>(n));
}

inline std::string read_string(int fd) {
  uint32_t n = 0;
  CHECK(read(fd, &n, 4) == 4);
  std::string s(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t k = read(fd, &s[got], n - got);
    CHECK(k > 0);
    got += static_cast<size_t>(k);
  }
  return s;
}

inline PeerContext peer_ctx(int me, int peer) { return uccl_test::peer_ctx(me, peer, 10); }

// Forks; the child accepts with `child_opt`, runs body(endpoint) and _exit()s with its return
// value (1 if one of its checks failed: uccl_test::child_exit_code). The parent connects with `parent_opt` and gets its endpoint back. Returns the child pid.
inline pid_t fork_pair(const ShmOptions& parent_opt, const ShmOptions& child_opt, std::unique_ptr<Endpoint>* parent_ep,
                       const std::function<int(Endpoint*)>& body) {
  int sv[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  std::fflush(nullptr);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(sv[0]);
    auto t = make_shm_transport(child_opt);
    std::string offer = read_string(sv[1]);
    std::string answer;
    Result<Endpoint*> ep = t->accept(peer_ctx(1, 0), offer, &answer, {sv[1]});
    if (!ep.ok()) {
      std::fprintf(stderr, "child accept failed: %s\n", ep.status().to_string().c_str());
      _exit(90);
    }
    write_string(sv[1], answer);  // the core's reply, written after accept() like the real thing
    std::unique_ptr<Endpoint> mine(ep.value());
    int rc = uccl_test::child_exit_code([&] { return body(mine.get()); });
    mine.reset();
    std::fflush(nullptr);
    _exit(rc);
  }
  close(sv[1]);
  auto t = make_shm_transport(parent_opt);
  Result<PendingConnect*> pc = t->start_connect(peer_ctx(0, 1));
  REQUIRE_OK(pc.status());
  std::unique_ptr<PendingConnect> pending(pc.value());
  write_string(sv[0], pending->offer());
  std::string answer = read_string(sv[0]);
  Result<Endpoint*> ep = pending->finish(answer, {sv[0]});
  REQUIRE_OK(ep.status());
  parent_ep->reset(ep.value());
  return pid;
}

// Waits for the child and returns its exit code (or 128 + signal).
inline int join(pid_t pid) {
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

// Drives the endpoint until every request is done or failed; returns the first failure.
inline Status drive(Endpoint* ep, const std::vector<Request*>& reqs, double timeout_s = 60) {
  const double deadline = now_s() + timeout_s;
  unsigned idle = 0;
  for (;;) {
    bool pending = false;
    for (Request* r : reqs) pending |= r->pending();
    if (!pending) break;
    if (!ep->progress() && ++idle % 1000 == 0) sched_yield();  // the peer may need our core
    if (now_s() > deadline) return Status(Code::kTimeout, "test drive() timed out");
  }
  for (Request* r : reqs)
    if (r->state == ReqState::kFailed) return r->error;
  return Status::Ok();
}

inline uint8_t pattern(size_t i, uint64_t seed) { return static_cast<uint8_t>((i * 131 + seed * 7 + (i >> 12)) & 0xff); }

inline std::vector<uint8_t> make_payload(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = pattern(i, seed);
  return v;
}

inline bool check_payload(const uint8_t* p, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != pattern(i, seed)) {
      std::fprintf(stderr, "payload mismatch at byte %zu of %zu (seed %llu)\n", i, n, static_cast<unsigned long long>(seed));
      return false;
    }
  return true;
}

inline Envelope env_for(uint64_t seq, uint32_t step = 0, uint64_t count = 0) {
  Envelope e;
  e.op_seq = seq;
  e.step = step;
  e.count = count;
  e.coll = 0;
  return e;
}

// Requests filled for the common case (filled in place: transports keep their address).
inline void make_send(SendRequest* s, const void* data, size_t bytes, const Envelope& env, bool duplex = false) {
  s->data = data;
  s->bytes = bytes;
  s->env = env;
  s->duplex = duplex;
}
inline void make_recv(RecvRequest* r, void* dst, size_t bytes, const Envelope& expect) {
  r->dst = dst;
  r->bytes = bytes;
  r->expect = expect;
}

// Segments this test process created ("/dev/shm/uccl-<pid>-*"); must be 0 after setup.
inline int leftover_segments() {
  int n = 0;
  const std::string prefix = "uccl-" + std::to_string(getpid()) + "-";
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d))
      if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) ++n;
    closedir(d);
  }
  return n;
}

inline shm::ShmEndpoint* as_shm(Endpoint* ep) { return dynamic_cast<shm::ShmEndpoint*>(ep); }

// push: where the receive was posted first, the sender writes (else the receiver pulls).
inline ShmOptions options(bool cma, size_t ring_bytes = 4 << 20, bool push = true) {
  ShmOptions o;
  o.cma = cma;
  o.cma_push = push;
  o.ring_bytes = ring_bytes;
  o.cma_min_bytes = 1 << 20;
  o.cma_max_bytes = SIZE_MAX;  // the tests move 64 MiB through CMA on purpose
  return o;
}

}  // namespace shmtest
