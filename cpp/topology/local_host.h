// What this rank says about its own host before publishing its PeerInfo: RDMA NICs found in
// sysfs, and what the topology file (UCCL_TOPO_FILE) or UCCL_CLUSTER declares (cluster,
// fabrics, NIC and link rates).
//
// Topology file (JSON or YAML, see topo_value.h), every key optional:
//   host_gbps: 40              # between ranks of one host (shared memory)
//   inter_cluster_gbps: 0.5    # default uplink of a cluster to the others
//   fabrics: [{name: ib0, kind: ib, gbps: 200}]
//   clusters:
//     - name: c0
//       fabric: ib0            # fabric of this cluster's NICs unless a NIC says otherwise
//       nic_gbps: 4            # a host's link into the cluster fabric
//       uplink_gbps: 0.5       # the cluster's link to other clusters (shared by all of it)
//       hosts:
//         - name: node1                      # hostname or UCCL_HOST_ID, or:
//           addresses: [10.210.1.1]          # any of its interface addresses
//           nics: [{name: eth0, kind: tcp, fabric: c0-eth, gbps: 4}]
//           rails: [eth0, eth1]              # local rank i uses rails[i % 2] (topology/rails.h)
// A host is matched by name (hostname or UCCL_HOST_ID) or by one of its addresses, so one
// file serves every rank. UCCL_CLUSTER, when set, wins over the file's cluster name.
#pragma once

#include <string>
#include <vector>

#include "base/config.h"
#include "uccl/status.h"
#include "topology/peer_info.h"
#include "topology/topo_value.h"

namespace uccl {

// UCCL_TOPO_FILE, UCCL_CLUSTER.
extern const TextSetting kTopoFile, kCluster;

// RDMA ports from /sys/class/infiniband (ACTIVE ones): kind ib or roce from the link layer,
// rated bandwidth from the port rate. The verbs transport's own listing is the better source
// (it knows GIDs and usable ports); this one serves builds without verbs.
std::vector<NicInfo> discover_rdma_nics(const std::string& sysfs_root = "/sys/class/infiniband");

// Applies a parsed topology document to `me` (cluster, NIC fabric/rates, link rates). Returns
// whether a host entry matched. Separate from the file reading so that tests can feed text.
Result<bool> apply_topology_doc(const TopoValue& doc, const std::string& host_id, PeerInfo* me);

// Fills in me->nics (adds `rdma_nics`), me->cluster and me->rates from UCCL_TOPO_FILE and
// UCCL_CLUSTER. A topology file that cannot be read or parsed is an error (a silently ignored
// typo would quietly change which algorithms run). The RDMA NICs come from the caller: the
// transports know them best (transports/registry.h local_rdma_nics()), and topology sits below
// the transports, so it asks nobody above it.
Status describe_local_host(PeerInfo* me, const std::vector<NicInfo>& rdma_nics);

// The host entry's `rails` (NIC names, local rank i takes entry i % size), empty when the file
// has none for this host (matched by host_id, hostname or one of me.nics' addresses).
Result<std::vector<std::string>> declared_rails(const std::string& host_id, const PeerInfo& me);

}  // namespace uccl
