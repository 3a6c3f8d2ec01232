// The TCP transport: works between any two hosts that can open a TCP connection.
//
// Each connection uses `nsocks_per_peer` already-authenticated sockets handed over by the core
// (Transport::sockets_per_connection()). Why several sockets: one TCP stream is limited by one
// congestion window and one receiving core's softirq work; striping large messages over a few
// streams is how NCCL and Gloo fill fast or long links.
//
//   auto t = make_tcp_transport(kNsocksPerPeer.get());  // the table entry: tcp_register.cc
//   active : auto c = t->start_connect(peer); send c->offer(); ep = c->finish(answer, fds)
//   passive: ep = t->accept(peer, offer, &answer, fds)
//
// The offer/answer carry a protocol version and whether the link is encrypted ("tcp1",
// "tcp1+tls": UCCL_ENCRYPT, tcp_tls.h); the sockets themselves are the connection.
// accept()/finish() do not block.
#pragma once

#include <memory>

#include "base/config.h"
#include "transports/transport.h"

namespace uccl {

// UCCL_NSOCKS_PERPEER (declared in tcp_register.cc).
extern const IntSetting kNsocksPerPeer;

// nsocks_per_peer is clamped to [1, 64].
std::unique_ptr<Transport> make_tcp_transport(int nsocks_per_peer);

}  // namespace uccl
