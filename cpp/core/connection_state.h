// The connection manager's in-flight connection records (private to its .cc files: the
// manager is split by responsibility into connection_manager.cc (endpoints, peers, paths and
// the progress loop), connection_dial.cc (the active side: dialing, hellos, the fallback over
// the transport table), connection_accept.cc (the passive side) and connection_failures.cc
// (failure records, notices and probes).
#pragma once

#include <unistd.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "base/net.h"
#include "core/connection_manager.h"

namespace uccl {

// The sockets of an outgoing connection being opened (ConnectionManager::dial), one Dialer at a
// time, so that a peer's host that does not answer never holds the engine. Each attempt lists
// the address of every socket (socket c dials entry c % size); an attempt that cannot open all
// its sockets closes them and the next attempt starts.
struct ConnectionManager::Dialing {
  Transport* transport = nullptr;
  std::string path_name;
  std::vector<std::vector<std::string>> attempts;
  size_t attempt = 0;                // the one being tried
  std::vector<int> fds;              // its sockets opened so far
  std::unique_ptr<Dialer> socket;    // the try in flight for socket fds.size()
  bool striping = false;             // attempts[0] is the striped one
  bool pending_striped = false;      // `pending` was made for a striped connection
  // An address of this peer refused for the whole window (its host answered, nothing listens):
  // the peer is gone, where no answer at all is tried again later.
  bool refused_before = false;
  Status last;                       // why the last attempt failed
  ~Dialing() {
    for (int fd : fds) ::close(fd);
  }
};

// An outgoing connection (we are the lower rank): its sockets being opened (dialing), then
// their hellos sent and the acks pending.
struct ConnectionManager::Outgoing {
  int peer = -1;
  TransportKind kind = TransportKind::kTcp;
  std::unique_ptr<PendingConnect> pending;
  std::unique_ptr<Dialing> dialing;   // until every socket is open; then fds
  std::vector<int> fds;
  std::vector<size_t> ack_read;       // bytes of (header [+ MAC] + answer) read so far, per socket
  std::vector<AckHeader> acks;
  // Keyed mode (handshake.h): the peer's greeting is read first, then the hello is sent.
  std::vector<Greeting> greetings;
  std::vector<size_t> greeting_read;  // bytes of the greeting read so far, per socket
  std::vector<HelloHeader> hellos;    // what each socket sent (its nonce), for the ack's MAC
  std::vector<std::string> ack_macs;
  std::string offer;
  StagingOffer staging;               // ours, sent in channel 0's hello
  int nchannels = 0;
  bool striped = false;               // the sockets run over several networks (kHelloStriped)
  std::string answer;                 // channel 0's answer
  double deadline = 0;
};

// An accepted socket whose hello is still being read.
struct ConnectionManager::Incoming {
  int fd = -1;
  std::string peer_addr;
  HelloHeader hello{};
  size_t got = 0;          // bytes of hello header [+ MAC] + offer read so far
  uint8_t nonce[kNonceBytes] = {};  // keyed mode: the greeting's nonce
  uint8_t mac[kMacBytes] = {};      // keyed mode: the hello's MAC
  std::string offer;
  double deadline = 0;
};

// Authenticated sockets of one incoming connection, waiting for all its channels. The
// connecting side sends its hellos only once every socket of the connection is open, so the
// rest follow at once; an assembly still short of sockets at its deadline (the peer died in
// between) is dropped, its sockets closed.
struct ConnectionManager::Assembling {
  TransportKind kind = TransportKind::kTcp;
  bool striped = false;  // its hellos' kHelloStriped (every socket's must agree)
  double deadline = 0;
  std::vector<int> fds;
  std::string offer;
  std::vector<HelloHeader> hellos;  // per socket, for the ack's MAC (keyed mode)
  std::vector<std::array<uint8_t, kNonceBytes>> nonces;
  int have = 0;
};

}  // namespace uccl
