// The connection manager's in-flight connection records (private to its .cc files: the
// manager is split by responsibility into connection_manager.cc (connecting and the fallback
// over the transport table), connection_accept.cc (the passive side) and
// connection_failures.cc (failure records, notices and probes).
#pragma once

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
  std::vector<size_t> ack_read;       // bytes of (header + answer) read so far, per socket
  std::vector<AckHeader> acks;
  std::string answer;                 // channel 0's answer
  double deadline = 0;
};

// An accepted socket whose hello is still being read.
struct ConnectionManager::Incoming {
  int fd = -1;
  std::string peer_addr;
  HelloHeader hello{};
  size_t got = 0;          // bytes of hello header + offer read so far
  std::string offer;
  double deadline = 0;
};

// Authenticated sockets of one incoming connection, waiting for all its channels.
struct ConnectionManager::Assembling {
  TransportKind kind = TransportKind::kTcp;
  std::vector<int> fds;
  std::string offer;
  int have = 0;
};

}  // namespace uccl
