// What the endpoint tests share (tcp, tls, cuda_ipc; shm's forked pairs have shm_test_util.h):
// a peer's context, a message's envelope, and a loop that drives both endpoints of a pair in
// one thread until a condition holds or a time limit passes (a broken endpoint fails the
// test instead of hanging it).
#pragma once

#include <cstdint>
#include <functional>

#include "base/net.h"
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
