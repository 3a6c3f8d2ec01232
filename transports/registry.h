// Which transports this build has, and how to make them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "topology/peer_info.h"
#include "transports/transport.h"

namespace uccl {

// A new transport instance (one per communicator and kind), or nullptr if not built/available.
std::unique_ptr<Transport> make_transport(TransportKind kind);
Result<TransportKind> transport_kind_from_name(const std::string& name);
// Whether the kind can be used in this process (verbs: library and a device present).
bool transport_available(TransportKind kind, std::string* why);
// After a peer failed: removes what processes of this host that died mid-setup left behind
// (shm segment names whose creator is gone), so a job's crash leaves /dev/shm clean.
void remove_dead_peers_leftovers();
// The RDMA NICs this rank may use: through the verbs transport's own device listing when it is
// built (UCCL_IB_HCA applies, RoCE ports get their subnet as fabric so two hosts on one RoCE
// network find each other), else read from sysfs (fabrics then need the topology file).
std::vector<NicInfo> local_rdma_nics();

}  // namespace uccl
