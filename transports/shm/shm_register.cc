// The shm transport's entry in the transport table (transports/registry.h).
#include "base/log.h"
#include "transports/registry.h"
#include "transports/shm/shm_segment.h"
#include "transports/shm/shm_transport.h"

namespace uccl {
namespace {

// Shared memory works between the ranks of one host: equal host identity (host_identity(),
// which includes the network namespace, so an emulated testbed's "hosts" stay apart).
PathVerdict shm_can_connect(const PeerInfo& me, const PeerInfo& peer) {
  PathVerdict v;
  v.ok = me.host_id == peer.host_id;
  v.why = v.ok ? "same host" : "rank " + std::to_string(peer.rank) + " is on another host (" + peer.hostname + ")";
  return v;
}

TransportEntry shm_entry() {
  TransportEntry e;
  e.name = "shm";
  e.id = TransportKind::kShm;
  e.priority = 30;  // one user-space copy (or CMA's single copy) beats any NIC
  e.can_connect = shm_can_connect;
  e.make = [] { return make_shm_transport(); };
  e.config = {&kShmRingBytes, &kShmCma, &kShmCmaMinBytes, &kShmCmaMaxBytes, &kShmCmaPush};
  e.cleanup = [] {
    if (int n = shm::remove_stale_segments())
      UCCL_INFO("shm: removed %d segment(s) that failed peers left in /dev/shm", n);
  };
  return e;
}

[[maybe_unused]] const bool registered = register_transport(shm_entry());

}  // namespace
}  // namespace uccl
