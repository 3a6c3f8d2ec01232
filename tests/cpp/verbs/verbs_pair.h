// Two-process harness for the verbs tests and benchmark (runs inside vm-run, on Soft-RoCE).
//
// run_pair() forks two ranks joined by a real loopback TCP socket (what the core's connection
// manager would hand over), builds a verbs endpoint in each with the offer/answer exchange of
// transport.h (offer in a "hello", answer in its reply, both length-prefixed on that socket),
// runs a body in each, and reports both exit codes. Header-only: the test and the benchmark
// are single files compiled against libuccl.so.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "transports/transport.h"
#include "transports/verbs/verbs_transport.h"

namespace vmtest {

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline void die(const char* what) {
  std::fprintf(stderr, "[pid %d] fatal: %s (%s)\n", getpid(), what, std::strerror(errno));
  std::_Exit(3);
}

inline void write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n) {
    ssize_t k = ::send(fd, c, n, MSG_NOSIGNAL);
    if (k <= 0) die("send");
    c += k, n -= static_cast<size_t>(k);
  }
}
inline void read_all(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n) {
    ssize_t k = ::recv(fd, c, n, 0);
    if (k <= 0) die("recv");
    c += k, n -= static_cast<size_t>(k);
  }
}
inline void send_str(int fd, const std::string& s) {
  uint32_t n = static_cast<uint32_t>(s.size());
  write_all(fd, &n, 4);
  write_all(fd, s.data(), n);
}
inline std::string recv_str(int fd) {
  uint32_t n = 0;
  read_all(fd, &n, 4);
  std::string s(n, '\0');
  read_all(fd, &s[0], n);
  return s;
}

struct Rank {
  int rank = 0;
  std::unique_ptr<uccl::Transport> transport;
  std::unique_ptr<uccl::Endpoint> ep;
  uccl::PeerContext peer;
};

// Rank 0 is the active side (start_connect/finish), rank 1 the passive side (accept).
inline bool connect_rank(Rank& r, int fd, const uccl::VerbsOptions& opt) {
  r.transport = uccl::make_verbs_transport(opt);
  r.peer.my_rank = r.rank;
  r.peer.peer_rank = 1 - r.rank;
  r.peer.peer_host = "vm-run";
  r.peer.peer_address = "127.0.0.1";
  r.peer.timeout_s = 30;
  if (r.rank == 0) {
    auto pc = r.transport->start_connect(r.peer);
    if (!pc.ok()) {
      std::fprintf(stderr, "rank 0 start_connect: %s\n", pc.status().to_string().c_str());
      return false;
    }
    std::unique_ptr<uccl::PendingConnect> c(pc.value());
    send_str(fd, c->offer());
    std::string answer = recv_str(fd);
    auto ep = c->finish(answer, {fd});
    if (!ep.ok()) {
      std::fprintf(stderr, "rank 0 finish: %s\n", ep.status().to_string().c_str());
      return false;
    }
    r.ep.reset(ep.value());
  } else {
    std::string offer = recv_str(fd);
    std::string answer;
    auto ep = r.transport->accept(r.peer, offer, &answer, {fd});
    if (!ep.ok()) {
      std::fprintf(stderr, "rank 1 accept: %s\n", ep.status().to_string().c_str());
      send_str(fd, "");
      return false;
    }
    r.ep.reset(ep.value());
    send_str(fd, answer);
  }
  return true;
}

// Drives progress until every request is done or failed; false on timeout. (An initializer
// list, not a vector: no allocation per call in the latency loop.)
inline bool wait_all(uccl::Endpoint* ep, std::initializer_list<uccl::Request*> reqs, double timeout_s = 60) {
  double deadline = now_s() + timeout_s;
  for (unsigned spin = 0;; ++spin) {
    bool pending = false;
    for (auto* r : reqs) pending |= r->pending();
    if (!pending) return true;
    if (spin % 256 == 255 && now_s() > deadline) return false;  // clock reads are slow in the VM
    ep->progress();
  }
}

// Forks rank 0 and rank 1 (hca0 / hca1 select their devices), connects them, runs body(rank)
// in each; returns true if both exit 0 (rank `killed` may instead die by SIGKILL: the tests of
// a peer killed mid-transfer). `options` supplies everything but the device;
// options.fail_lane_for_testing applies to rank `fail_lane_rank` only (both ranks: -1).
inline bool run_pair(const std::string& hca0, const std::string& hca1, uccl::VerbsOptions options,
                     const std::function<int(Rank&)>& body, int timeout_s = 120, int killed = -1,
                     int fail_lane_rank = -1) {
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (lfd < 0 || ::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) || ::listen(lfd, 4) ||
      ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len))
    die("listen");
  std::fflush(stdout);
  pid_t pids[2];
  for (int rank = 0; rank < 2; ++rank) {
    pids[rank] = fork();
    if (pids[rank] < 0) die("fork");
    if (pids[rank] == 0) {
      alarm(static_cast<unsigned>(timeout_s));  // a hang becomes a visible failure
      int fd;
      if (rank == 0) {
        fd = ::socket(AF_INET, SOCK_STREAM, 0);
        if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a)) die("connect");
      } else {
        fd = ::accept(lfd, nullptr, nullptr);
        if (fd < 0) die("accept");
      }
      ::close(lfd);
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      Rank r;
      r.rank = rank;
      options.hca = rank == 0 ? hca0 : hca1;
      if (fail_lane_rank >= 0 && rank != fail_lane_rank) options.fail_lane_for_testing = -1;
      if (!connect_rank(r, fd, options)) std::_Exit(2);
      int rc = body(r);
      std::fflush(stdout);
      std::fflush(stderr);
      std::_Exit(rc);
    }
  }
  ::close(lfd);
  bool ok = true;
  for (int rank = 0; rank < 2; ++rank) {
    int st = 0;
    waitpid(pids[rank], &st, 0);
    bool good = (WIFEXITED(st) && WEXITSTATUS(st) == 0) ||
                (rank == killed && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    if (!good) {
      std::fprintf(stderr, "  rank %d: %s %d\n", rank, WIFEXITED(st) ? "exit" : "signal",
                   WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    }
    ok &= good;
  }
  return ok;
}

}  // namespace vmtest
