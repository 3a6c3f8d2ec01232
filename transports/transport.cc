#include "transports/transport.h"

#include <cstdio>

#include "core/communicator.h"

namespace uccl {

const char* transport_name(TransportKind k) {
  switch (k) {
    case TransportKind::kTcp: return "tcp";
    case TransportKind::kShm: return "shm";
    case TransportKind::kVerbs: return "verbs";
    case TransportKind::kStaged: return "staged";
  }
  return "unknown";
}

std::string PeerContext::describe() const {
  std::string s = "rank " + std::to_string(peer_rank) + " (host " + (peer_host.empty() ? "?" : peer_host);
  if (!peer_address.empty()) s += ", " + peer_address;
  return s + ")";
}

std::string envelope_to_string(const Envelope& e) {
  char buf[256];
  const char* dt = dtype_valid(e.dtype) ? dtype_name(static_cast<DataType>(e.dtype)) : "?";
  if (e.coll == static_cast<uint8_t>(Collective::kSendRecv)) {
    // Point-to-point: op_seq counts messages of this peer pair, root carries the tag.
    std::snprintf(buf, sizeof buf, "p2p message #%llu (count %llu, %s, tag %u)", static_cast<unsigned long long>(e.op_seq),
                  static_cast<unsigned long long>(e.count), dt, static_cast<unsigned>(e.root));
    return buf;
  }
  std::snprintf(buf, sizeof buf, "%s #%llu (count %llu, %s, %s, root %d)",
                collective_name(static_cast<Collective>(e.coll)), static_cast<unsigned long long>(e.op_seq),
                static_cast<unsigned long long>(e.count), dt,
                redop_valid(e.redop) ? redop_name(static_cast<RedOp>(e.redop)) : "?", e.root);
  return buf;
}

Status mismatch_error(const PeerContext& peer, const Envelope& expect, size_t expect_bytes,
                      const Envelope& got, size_t got_bytes) {
  std::string msg = peer.describe() + " sent " + envelope_to_string(got) + " with " + std::to_string(got_bytes) +
                    " bytes, but rank " + std::to_string(peer.my_rank) + " expected " + envelope_to_string(expect) +
                    " with " + std::to_string(expect_bytes) + " bytes";
  return Status(Code::kMismatch, msg, peer.peer_rank);
}

Status peer_closed_error(const PeerContext& peer, const std::string& detail) {
  return Status(Code::kRemoteError, peer.describe() + " closed the connection" + (detail.empty() ? "" : " (" + detail + ")"),
                peer.peer_rank);
}

}  // namespace uccl
