// A Topology from the topology file alone, for planning before any process runs (uccl.cost):
// the file says what each host is (cluster, NICs, link rates), a placement says which host each
// rank runs on. Each rank's PeerInfo is what describe_local_host() would publish on that host
// with no NIC discovered (the file's NIC declarations stand for them), so the Topology, the cost
// model and the algorithm choice are the ones a communicator of that shape would compute.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "uccl/status.h"
#include "topology/topo_value.h"
#include "topology/topology.h"

namespace uccl {

// Reads and parses a topology file (JSON or YAML by extension or first character): the one
// reader UCCL_TOPO_FILE and uccl.cost share. Errors name the path.
Result<TopoValue> read_topology_file(const std::string& path);

// placement[r] = the host (a name in the file) rank r runs on. A name the file does not know is
// InvalidArgument naming it: a typo must not quietly become a host with default rates.
Result<std::shared_ptr<const Topology>> declared_topology(const TopoValue& doc,
                                                          const std::vector<std::string>& placement);

}  // namespace uccl
