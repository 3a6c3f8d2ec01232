// The tcp transport's entry in the transport table (transports/registry.h).
#include "transports/registry.h"
#include "transports/tcp/tcp_endpoint.h"
#include "transports/tcp/tcp_tls.h"
#include "transports/tcp/tcp_transport.h"

namespace uccl {

const IntSetting kNsocksPerPeer("tcp", "UCCL_NSOCKS_PERPEER", "2",
                                "TCP sockets per peer; large messages are striped across them", int_in(1, 64));

namespace {

// Any two ranks with a routable address: over the best common network (the peer's address on
// a fabric this rank is attached to, else a routed one).
PathVerdict tcp_can_connect(const PeerInfo& me, const PeerInfo& peer) {
  PathVerdict v;
  v.ok = true;
  auto addrs = rank_peer_addresses(me, peer);
  if (!addrs.empty()) {
    v.my_nic = addrs[0].my_nic;
    v.peer_nic = addrs[0].peer_nic;
    v.fabric = addrs[0].fabric;
    v.target = addrs[0].address;
  }
  v.why = !v.fabric.empty() ? "same network " + v.fabric : "routed, no common fabric";
  return v;
}

TransportEntry tcp_entry() {
  TransportEntry e;
  e.name = "tcp";
  e.id = TransportKind::kTcp;
  e.priority = 10;  // works everywhere: the last resort
  e.can_connect = tcp_can_connect;
  e.make = [] { return make_tcp_transport(kNsocksPerPeer.get()); };
  e.config = {&kNsocksPerPeer, &kTcpStripeMinBytes, &kEncrypt, &kTlsKernel};
  return e;
}

[[maybe_unused]] const bool registered = register_transport(tcp_entry());

}  // namespace
}  // namespace uccl
