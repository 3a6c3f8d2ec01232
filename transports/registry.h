// Which transports this build has, and how to make them.
#pragma once

#include <memory>
#include <string>

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

}  // namespace uccl
