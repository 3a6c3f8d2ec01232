// The verbs transport's entry in the transport table (transports/registry.h). Compiled only
// when the build found the verbs headers (UCCL_WITH_VERBS); without it the table has no verbs.
#include <algorithm>

#include "transports/registry.h"
#include "transports/verbs/verbs_transport.h"

namespace uccl {
namespace {

bool is_rdma(const NicInfo& n) { return n.kind == "ib" || n.kind == "roce"; }

// Two RDMA NICs talk only when they sit on the same fabric (IB and RoCE never talk directly,
// nor do two IB subnets), so the fabric label decides, not the kind alone. The fastest such
// pair is used.
PathVerdict verbs_can_connect(const PeerInfo& me, const PeerInfo& peer) {
  PathVerdict v;
  double best = -1;
  for (auto& a : me.nics)
    for (auto& b : peer.nics)
      if (is_rdma(a) && is_rdma(b) && a.kind == b.kind && !a.fabric.empty() && a.fabric == b.fabric &&
          std::min(a.gbps, b.gbps) > best) {
        best = std::min(a.gbps, b.gbps);
        v.ok = true;
        v.my_nic = a.name;
        v.peer_nic = b.name;
        v.target = b.name;
        v.fabric = a.fabric;
        v.why = a.kind + " fabric " + a.fabric;
      }
  if (!v.ok) v.why = "no RDMA NIC on a fabric shared with rank " + std::to_string(peer.rank);
  return v;
}

TransportEntry verbs_entry() {
  TransportEntry e;
  e.name = "verbs";
  e.aliases = {"ib", "roce"};
  e.id = TransportKind::kVerbs;
  e.priority = 20;  // a shared RDMA fabric beats TCP; shared memory beats both
  e.available = [](std::string* why) { return verbs_available(why); };
  e.can_connect = verbs_can_connect;
  e.make = [] { return make_verbs_transport(); };
  e.config = {&kIbHca, &kIbGidIndex, &kIbQpsPerConnection, &kIbTimeout, &kIbRetryCnt, &kIbTc, &kIbSl};
  e.local_nics = [] {
    std::vector<NicInfo> out;
    for (const VerbsNic& n : list_verbs_nics())
      if (n.active) out.push_back({n.name, n.link_layer, n.fabric, n.address, n.gbps, ""});
    return out;
  };
  return e;
}

[[maybe_unused]] const bool registered = register_transport(verbs_entry());

}  // namespace
}  // namespace uccl
