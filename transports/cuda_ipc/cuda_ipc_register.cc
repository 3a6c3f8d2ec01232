// The cuda_ipc transport's entry in the transport table (transports/registry.h).
#include "transports/cuda_ipc/cuda_ipc_transport.h"
#include "transports/registry.h"

namespace uccl {
namespace {

// CUDA IPC needs both ranks on one host (same rule as shm: equal host identity). Whether both
// processes can use CUDA is not in PeerInfo: each side answers kNotSupported at connect time
// when it cannot (cuda_ipc_usable), and the pair falls back to the next entry (shm).
PathVerdict cuda_ipc_can_connect(const PeerInfo& me, const PeerInfo& peer) {
  PathVerdict v;
  v.ok = me.host_id == peer.host_id;
  v.why = v.ok ? "same host, CUDA IPC" : "rank " + std::to_string(peer.rank) + " is on another host (" + peer.hostname + ")";
  return v;
}

TransportEntry cuda_ipc_entry() {
  TransportEntry e;
  e.name = "cuda_ipc";
  e.id = static_cast<TransportKind>(4);
  e.priority = 35;  // above shm: device memory moves GPU to GPU; host memory as over shm
  e.available = [](std::string* why) { return cuda_ipc_usable(why); };
  e.can_connect = cuda_ipc_can_connect;
  e.make = [] { return make_cuda_ipc_transport(); };
  e.config = {&kCudaIpc};
  e.native_device_memory = true;  // not to be wrapped by the staged endpoint
  return e;
}

[[maybe_unused]] const bool registered = register_transport(cuda_ipc_entry());

}  // namespace
}  // namespace uccl
