// What the endpoint tests share (tcp, tls, cuda_ipc, staged; shm's forked pairs have
// shm_test_util.h): a peer's context, a message's envelope, a loopback tcp pair, and a loop
// that drives both endpoints of a pair in one thread until a condition holds or a time limit
// passes (a broken endpoint fails the test instead of hanging it).
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <functional>
#include <memory>

#include "base/net.h"
#include "test_util.h"
#include "transports/tcp/tcp_transport.h"
#include "transports/transport.h"

namespace uccl_test {

inline uccl::PeerContext peer_ctx(int me, int peer, double timeout_s = 5) {
  uccl::PeerContext p;
  p.my_rank = me;
  p.peer_rank = peer;
  p.peer_host = "localhost";
  p.timeout_s = timeout_s;
  return p;
}

inline uccl::Envelope env(uint64_t op_seq, uint64_t count, uint8_t coll = 0,
                          uccl::DataType dt = uccl::DataType::kFloat32) {
  uccl::Envelope e;
  e.op_seq = op_seq;
  e.count = count;
  e.coll = coll;
  e.dtype = static_cast<uint8_t>(dt);
  return e;
}

// A tcp pair over one loopback socket, for tests of endpoints that wrap one (cuda_ipc, staged):
// `a` is rank 0 (the connecting side), `b` rank 1.
struct TcpPair {
  std::unique_ptr<uccl::Endpoint> a, b;
};
inline TcpPair tcp_pair() {
  auto t = uccl::make_tcp_transport(1);
  uccl::SockAddr addr = uccl::parse_address("127.0.0.1", 0).value();
  auto lfd = uccl::listen_on(&addr);
  REQUIRE_OK(lfd.status());
  auto c = uccl::connect_to(addr, uccl::now_s() + 5);
  REQUIRE_OK(c.status());
  int s = accept(lfd.value(), nullptr, nullptr);
  REQUIRE(s >= 0);
  close(lfd.value());
  auto pc = t->start_connect(peer_ctx(0, 1));
  REQUIRE_OK(pc.status());
  std::unique_ptr<uccl::PendingConnect> pend(pc.value());
  std::string answer;
  auto eb = t->accept(peer_ctx(1, 0), pend->offer(), &answer, {s});
  REQUIRE_OK(eb.status());
  auto ea = pend->finish(answer, {c.value()});
  REQUIRE_OK(ea.status());
  return TcpPair{std::unique_ptr<uccl::Endpoint>(ea.value()), std::unique_ptr<uccl::Endpoint>(eb.value())};
}

// `pair` has endpoints `a` and `b` (either may be empty); true once done(), false after limit_s.
template <class Pair>
bool drive(Pair& pair, const std::function<bool()>& done, double limit_s = 30) {
  const double deadline = uccl::now_s() + limit_s;
  while (!done()) {
    if (pair.a) pair.a->progress();
    if (pair.b) pair.b->progress();
    if (uccl::now_s() > deadline) return false;
  }
  return true;
}

}  // namespace uccl_test
