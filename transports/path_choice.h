// Which path two ranks use: the best transport of the table that can carry the pair.
//
// Each transport states its own rule (TransportEntry::can_connect, in its folder):
//
//   shm    same host (equal host_id)
//   verbs  an RDMA NIC each, same kind and same fabric (when verbs is usable in this process)
//   tcp    always, over the best common network
//
// and the table's priorities order them (shm, verbs, tcp). The choice is made from the two
// ranks' PeerInfo alone, so both ends of a pair reach the same answer. The handshake itself
// always runs over TCP, to the peer's listen addresses ranked by rank_peer_addresses()
// (topology/peer_info.h): those on a fabric this rank is attached to first, fastest first.
#pragma once

#include <string>
#include <vector>

#include "base/config.h"
#include "topology/peer_info.h"
#include "transports/transport.h"

namespace uccl {

struct PathChoice {
  TransportKind kind{};
  std::string name;              // the transport's name
  std::string my_nic, peer_nic;  // names of the NICs chosen ("" for shm)
  std::string fabric;            // common fabric, "" if none (routed)
  std::string target;            // the peer's NIC or address the path ends at
  std::vector<std::string> peer_addresses;  // the peer's listen addresses, best first
  std::string why;
  std::string describe() const;  // "tcp via eth0 -> 10.210.1.2:4000 (same network c0)"
};

// The transports that can carry me <-> peer, best first, for the connection manager to try in
// order. `forced` is "" or "auto" (every available entry whose rule agrees, by priority), or a
// comma-separated list of names tried in that order (UCCL_TRANSPORT / CommOptions::transport).
// Errors: kInvalidArgument for an unknown name, kNotSupported when no transport is left (the
// message says why each was left out).
Result<std::vector<PathChoice>> path_candidates(const PeerInfo& me, const PeerInfo& peer, const std::string& forced);

// Ok when `forced` is "", "auto" or a list of registered names; else kInvalidArgument naming
// the unknown one and the names that exist (Communicator::create checks it up front).
Status check_transport_names(const std::string& forced);

// The first candidate in auto mode (for describe() and tests).
PathChoice choose_path(const PeerInfo& me, const PeerInfo& peer);

// The networks a pair's connection is striped over (topology/peer_info.h stripe_lanes), as
// seen from the connecting (lower) rank so that both ends get the same list in the same
// order; empty with UCCL_STRIPE_NETWORKS=off or fewer than two common subnets. Transports that
// stripe (Transport::stripes_over_networks) put socket c on lane c % size.
std::vector<StripeLane> pair_lanes(const PeerInfo& me, const PeerInfo& peer);

// UCCL_STRIPE_NETWORKS: auto | off (off: tcp keeps one network, verbs one HCA port).
extern const TextSetting kStripeNetworks;

}  // namespace uccl
