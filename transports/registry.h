// The table of transports: what the core knows about every transport it can use.
//
// Adding a transport is a folder (transports/<name>/) and one registration in it:
//
//   // transports/foo/foo_register.cc
//   namespace { const bool registered = register_transport({...}); }
//
// The entry brings everything the rest of uccl needs to know: the name (UCCL_TRANSPORT,
// describe()), a wire id (the handshake names the transport by it), a priority (auto picks the
// usable entry with the highest one), can_connect(me, peer) (the rule for which pairs of ranks
// it can carry, kept with the transport), whether it is usable in this process, a factory, its
// config variables (declared in its folder, listed here for the docs) and a cleanup hook. No
// switch over transports exists anywhere else; the connection manager walks the table.
//
// Fallback: candidates for a peer are the entries that are available and can_connect, best
// first (or those UCCL_TRANSPORT / CommOptions::transport names, in that order). A connect
// that answers kNotSupported (start_connect on this rank, accept on the peer's) makes the
// connection manager try the next candidate for that peer; describe() says which was refused
// and why. Any other error fails the peer.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/config.h"
#include "topology/peer_info.h"
#include "transports/transport.h"

namespace uccl {

// Whether a transport can carry the pair me <-> peer, and over what (for describe() and logs).
struct PathVerdict {
  bool ok = false;
  std::string my_nic, peer_nic;  // names of the NICs used ("" for shm)
  std::string fabric;            // the common fabric, "" if none (routed)
  std::string target;            // what describe() shows after the arrow (tcp: the address)
  std::string why;               // "same host", "ib fabric ibA"; when !ok, why not
};

struct TransportEntry {
  std::string name;                  // "tcp"; how UCCL_TRANSPORT and describe() name it
  std::vector<std::string> aliases;  // other names UCCL_TRANSPORT accepts ("ib", "roce")
  TransportKind id{};                // on the wire (handshake); unique, below kMaxTransports
  int priority = 0;                  // auto: the highest usable one first
  // Built and usable in this process (verbs: libibverbs and an ACTIVE port); else why not.
  std::function<bool(std::string* why)> available = [](std::string*) { return true; };
  // The rule for a pair, from the two ranks' PeerInfo alone (both sides decide the same way).
  std::function<PathVerdict(const PeerInfo& me, const PeerInfo& peer)> can_connect;
  // A new instance, one per communicator (created on first use).
  std::function<std::unique_ptr<Transport>()> make;
  std::vector<const ConfigVar*> config;  // the variables this transport reads
  // After a peer failed: remove what dead processes of this host left behind (may be empty).
  std::function<void()> cleanup;
  // RDMA NICs this transport knows for PeerInfo (may be empty; verbs lists its ports).
  std::function<std::vector<NicInfo>()> local_nics;
  // The endpoints move device memory themselves (cuda_ipc: GPU to GPU). The core must then
  // not put a StagedEndpoint in front of them, which would stage device buffers through the
  // host before they arrive. Both ranks of a pair use the same entry, so both decide alike.
  bool native_device_memory = false;
};

// Adds an entry (from a static initializer of the transport's folder, or a test). Returns true;
// a duplicate name or id, an id out of range or a missing factory/rule is a bug and aborts.
bool register_transport(TransportEntry entry);
// Removes a test's entry again (by name). Not thread safe against concurrent connects.
void unregister_transport(const std::string& name);
// Every registered entry, best priority first.
std::vector<const TransportEntry*> transport_table();
const TransportEntry* find_transport(TransportKind id);
const TransportEntry* find_transport(const std::string& name_or_alias);

// UCCL_TRANSPORT: "auto", or transport names to try in this order ("shm,tcp").
extern const TextSetting kTransport;

// After a peer failed: every entry's cleanup (a job's crash leaves /dev/shm clean).
void remove_dead_peers_leftovers();
// The RDMA NICs this rank may use: from the transports that list their own (verbs: UCCL_IB_HCA
// applies, RoCE ports get their subnet as fabric), else read from sysfs (fabrics then need the
// topology file).
std::vector<NicInfo> local_rdma_nics();

}  // namespace uccl
