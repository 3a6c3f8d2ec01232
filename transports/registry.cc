#include "transports/registry.h"

#include "base/config.h"
#include "base/log.h"
#include "topology/local_host.h"
#include "transports/shm/shm_segment.h"
#include "transports/shm/shm_transport.h"
#include "transports/tcp/tcp_transport.h"
#if UCCL_HAVE_VERBS
#include "transports/verbs/verbs_transport.h"
#endif

namespace uccl {

std::unique_ptr<Transport> make_transport(TransportKind kind) {
  switch (kind) {
    case TransportKind::kTcp: return make_tcp_transport(config().nsocks_per_peer);
    case TransportKind::kShm: return make_shm_transport();
    case TransportKind::kVerbs:
#if UCCL_HAVE_VERBS
      if (transport_available(kind, nullptr)) return make_verbs_transport();
#endif
      return nullptr;
    case TransportKind::kStaged: return nullptr;
  }
  return nullptr;
}

Result<TransportKind> transport_kind_from_name(const std::string& name) {
  if (name == "tcp") return TransportKind::kTcp;
  if (name == "shm") return TransportKind::kShm;
  if (name == "verbs" || name == "ib" || name == "roce") return TransportKind::kVerbs;
  return InvalidArgument("unknown transport '" + name + "' (expected auto, tcp, shm or verbs)");
}

bool transport_available(TransportKind kind, std::string* why) {
  switch (kind) {
    case TransportKind::kTcp:
    case TransportKind::kShm: return true;
    case TransportKind::kVerbs:
#if UCCL_HAVE_VERBS
      return verbs_available(why);
#else
      if (why) *why = "not built (UCCL_WITH_VERBS)";
      return false;
#endif
    case TransportKind::kStaged:
      if (why) *why = "not built";
      return false;
  }
  return false;
}

void remove_dead_peers_leftovers() {
  if (int n = shm::remove_stale_segments()) UCCL_INFO("shm: removed %d segment(s) that failed peers left in /dev/shm", n);
}

std::vector<NicInfo> local_rdma_nics() {
#if UCCL_HAVE_VERBS
  std::vector<NicInfo> out;
  for (const VerbsNic& v : list_verbs_nics()) {
    if (!v.active) continue;
    out.push_back({v.name, v.link_layer, v.fabric, v.address, v.gbps});
  }
  return out;
#else
  return discover_rdma_nics();
#endif
}

}  // namespace uccl
