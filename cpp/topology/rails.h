// Which NIC is this rank's rail (issue 18, rails item 1).
//
// Rail-optimised hosts give each accelerator its own NIC, and the rail-only design needs local
// rank i to talk over rail i; without a choice every rank of a host would listen on (and its
// peers dial) the same fastest NIC and share an eighth of the host's bandwidth. The rank's NIC,
// in order of precedence:
//   1. a per-local-rank list in UCCL_SOCKET_IFNAME / UCCL_IB_HCA ("=eth0;=eth1", base/net.h);
//   2. the topology file's `rails` for the host (topology/local_host.h): entry local_rank % size;
//   3. the NIC closest to the rank's accelerator in the PCIe tree (sysfs: the longest common
//      path of the two devices under /sys/devices; equal paths, then the same NUMA node);
//   4. its local rank: rail local_rank % k of the host's k NICs (sorted by subnet);
// where the candidates are the interfaces UCCL_SOCKET_IFNAME selects, one per subnet, those
// much slower than the fastest left out (a management network is not a rail). With fewer than
// two candidates, one rank on the host, or UCCL_RAIL_NICS=off the rank listens on every
// candidate, and a tcp connection stripes over the subnets it shares with its peer
// (transports/path_choice.h pair_lanes).
// A rail NIC that is missing or has no link (IFF_RUNNING clear: cable, switch port) is not
// fatal: the rank listens on every NIC that has a link instead, so its connections stripe over
// the other rails, and says so in describe() and a warning (UCCL_RAIL_NICS=strict refuses
// with kInvalidArgument instead). NICs without a link are never rail candidates. Its peers on
// other hosts must then be reachable from those NICs: true where the rails are routed to each
// other (a rail-optimised fat tree), not on separate unrouted rail planes (the rank cannot
// dial its rail peers' addresses; the error names the peer and the address).
#pragma once

#include <string>
#include <vector>

#include "base/config.h"
#include "base/net.h"
#include "uccl/status.h"

namespace uccl {

extern const TextSetting kRailNics;  // UCCL_RAIL_NICS: auto | off

struct RailCandidate {
  std::string name;     // interface ("eth1") or RDMA device ("mlx5_1")
  std::string network;  // subnet; "" unknown (then each candidate is its own network)
  double gbps = 0;      // 0 unknown
  std::string sysfs_device;  // the device's sysfs path (/sys/class/net/eth1/device), "" unknown
};

struct RailPick {
  int index = -1;   // into the candidates; -1: use them all
  std::string why;  // for describe(): "rail 1 of 2 for local rank 1", "closest to accelerator ..."
};

// accel_pci: the PCI address of the rank's accelerator ("0000:17:00.0"), "" when it has none or
// it is unknown; sysfs_root: "/sys" (tests pass a fake tree).
RailPick pick_rail(const std::vector<RailCandidate>& candidates, int local_rank, int local_size,
                   const std::string& accel_pci, const std::string& sysfs_root = "/sys");

// The PCI address of the accelerator this process computes on, from the first registered
// device backend that reports one ("" without).
std::string accelerator_pci();

// The listeners' interfaces: `ifs` (what UCCL_SOCKET_IFNAME selected) restricted to this rank's
// rail NIC when pick_rail() picks one, with the launcher's local rank and size and the PCI
// address of the accelerator a registered device backend reports; *why says which (unchanged
// when it picks none).
// Errors: an unreadable topology file (kInvalidArgument...), or a declared rail that is not
// among `ifs` (kInvalidArgument naming it).
Result<std::vector<NetInterface>> rail_interfaces(const std::vector<NetInterface>& ifs, std::string* why);

// `ifs` without the NICs that have no link (loopback stays).
std::vector<NetInterface> with_link(const std::vector<NetInterface>& ifs);
// This rank's rail NIC (`what`: which, and why it is gone) is missing or has no link: every NIC
// of `all` that has one, with *why saying so (and a warning); kInvalidArgument under
// UCCL_RAIL_NICS=strict or when no NIC is left.
Result<std::vector<NetInterface>> rail_fallback(const std::vector<NetInterface>& all, const std::string& what,
                                                std::string* why);

}  // namespace uccl
