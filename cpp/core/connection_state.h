// The connection manager's in-flight connection records (private to its .cc files: the
// manager is split by responsibility into connection_manager.cc (connecting and the fallback
// over the transport table), connection_accept.cc (the passive side) and
// connection_failures.cc (failure records, notices and probes).
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "core/connection_manager.h"

namespace uccl {

// An outgoing connection (we are the lower rank): sockets sent their hello, acks pending.
struct ConnectionManager::Outgoing {
  int peer = -1;
  TransportKind kind = TransportKind::kTcp;
  std::unique_ptr<PendingConnect> pending;
  std::vector<int> fds;
  std::vector<size_t> ack_read;       // bytes of (header [+ MAC] + answer) read so far, per socket
  std::vector<AckHeader> acks;
  // Keyed mode (handshake.h): the peer's greeting is read first, then the hello is sent.
  std::vector<Greeting> greetings;
  std::vector<size_t> greeting_read;  // bytes of the greeting read so far, per socket
  std::vector<HelloHeader> hellos;    // what each socket sent (its nonce), for the ack's MAC
  std::vector<std::string> ack_macs;
  std::string offer;
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
