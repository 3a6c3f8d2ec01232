// Which path two ranks use: the best one they have in common.
//
//   same host (equal host_id)                     -> shm
//   an RDMA NIC each, same kind and same fabric   -> verbs (when the verbs transport is usable)
//   otherwise                                     -> tcp, over the best common network
//
// Two RDMA NICs talk only when they sit on the same fabric (IB and RoCE never talk directly,
// nor do two IB subnets), so the fabric label decides, not the kind alone. For TCP every
// routable address works, but the peer's addresses are tried in order of preference: first
// those on a fabric one of this rank's NICs is attached to (same cluster network), fastest
// first, then the rest. That is what makes a data-parallel group inside a cluster ride the
// cluster fabric while a pipeline group across clusters uses the network both can reach.
#pragma once

#include <string>
#include <vector>

#include "topology/peer_info.h"
#include "transports/transport.h"

namespace uccl {

struct PathChoice {
  TransportKind kind = TransportKind::kTcp;
  std::string my_nic, peer_nic;  // names of the NICs chosen ("" for shm)
  std::string fabric;            // common fabric, "" if none (routed)
  std::vector<std::string> peer_addresses;  // tcp: peer listen addresses, best first
  std::string why;
  std::string describe() const;  // "tcp via eth0 -> 10.210.1.2:4000 (same fabric c0)"
};

// verbs_usable: the verbs transport is built and has a device (registry's transport_available).
PathChoice choose_path(const PeerInfo& me, const PeerInfo& peer, bool verbs_usable = false);

}  // namespace uccl
