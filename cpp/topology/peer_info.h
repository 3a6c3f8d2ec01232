// PeerInfo: what each rank publishes in the store so that its peers can reach it and decide
// how (shared memory on the same host, RDMA on the same fabric, TCP otherwise).
#pragma once

#include <string>
#include <vector>

#include "uccl/status.h"

namespace uccl {

struct NicInfo {
  std::string name;      // interface or device name ("eth0", "mlx5_0:1", "rxe0:1")
  std::string kind;      // "tcp", "roce", "ib"
  std::string fabric;    // which fabric/cluster network it is attached to ("" = unknown)
  std::string address;   // IP (tcp/roce) or LID/GID text
  double gbps = 0;       // rated bandwidth
  std::string network;   // tcp: the interface's subnet ("10.210.1.0/24"); two NICs on one subnet share a wire
};

// Declared link rates (topology file), in Gbit/s; 0 = not declared. Published with the PeerInfo
// so that every rank computes the same cost model from the same numbers (the algorithm choice
// must agree on all ranks, and a rank may not have the file).
struct LinkRates {
  double host_gbps = 0;    // between ranks of one host (shared memory), per rank
  double nic_gbps = 0;     // a host's link into its cluster fabric (shared by the host's ranks)
  double uplink_gbps = 0;  // the cluster's link to other clusters (shared by the whole cluster)
};

struct PeerInfo {
  int rank = -1;
  std::string host_id;   // equal host_id <=> shared memory works (see host_identity())
  std::string hostname;
  // The kernel the rank runs on (its boot id): ranks with equal `machine` share its CPUs even when
  // they are different hosts for the topology (network namespaces, containers). The waiting policy
  // counts them (core/idle_wait.h); "" from a peer that does not say.
  std::string machine;
  int pid = 0;
  std::string cluster;   // UCCL_CLUSTER / topology file label
  std::vector<std::string> listen;  // "ip:port" of this communicator's listeners
  std::vector<NicInfo> nics;
  LinkRates rates;
  // "ip:port" of this communicator's agreement listener (core/agreement.h: shrink), "" if none.
  std::string agree;
  // The settings every rank of the communicator must share (base/config.h Scope::kJob), name
  // and value text, sorted by name: they decide what the ranks exchange. Empty from a peer that
  // does not say.
  std::vector<std::pair<std::string, std::string>> settings;

  std::string serialize() const;
  static Result<PeerInfo> parse(const std::string& text);
};

// One of the peer's listen addresses, ranked for this rank: its NIC entry of kind tcp carries
// the listen address; one on a fabric this rank is attached to comes first (the cluster
// network before a routed path), then the faster. Handshakes (and tcp) dial them in order.
struct AddressChoice {
  std::string address;           // "ip:port"
  std::string my_nic, peer_nic;  // the NICs on the common fabric ("" when routed / unknown)
  std::string fabric;            // "" when no common fabric
};
std::vector<AddressChoice> rank_peer_addresses(const PeerInfo& me, const PeerInfo& peer);

// "" when both ranks publish the same job-wide settings, else the first that differs:
// "UCCL_SMALL_MSG_BYTES is '65536' on rank 0 but '1024' on rank 2".
std::string settings_difference(const PeerInfo& me, const PeerInfo& peer);

// Striping one connection over several networks (issue 18, rails item 2): a lane is one of the
// peer's listen addresses on a subnet one of my tcp NICs is on too. Lanes are distinct subnets,
// sorted by subnet so that both ends of a pair list them in the same order; a lane whose rate
// is known and below half the fastest known lane's is left out (a management network beside
// the fabric carries nothing). Fewer than two lanes: empty (nothing to stripe over).
struct StripeLane {
  std::string network;      // "10.210.1.0/24"
  std::string my_nic;       // my interface on it
  std::string peer_address; // "ip:port" of the peer's listener on it
  double gbps = 0;          // min of the two NICs' rates (0 unknown)
};
std::vector<StripeLane> stripe_lanes(const PeerInfo& me, const PeerInfo& peer);

// Identifies the host for shared-memory purposes: UCCL_HOST_ID if set, else hostname + boot id
// + network-namespace inode. The namespace is part of it on purpose: ranks in different
// namespaces are "different hosts" in the emulated testbed, and shm would silently bypass it.
std::string host_identity();
// The kernel's boot id (PeerInfo::machine).
std::string machine_identity();

}  // namespace uccl
