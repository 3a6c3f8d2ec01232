#include "transports/transport.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "uccl/types.h"

namespace uccl {

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
  std::snprintf(buf, sizeof buf, "%s #%llu (count %llu, %s, %s, root %d, %s)",
                collective_name(static_cast<Collective>(e.coll)), static_cast<unsigned long long>(e.op_seq),
                static_cast<unsigned long long>(e.count), dt,
                redop_valid(e.redop) ? redop_name(static_cast<RedOp>(e.redop)) : "?", e.root,
                algorithm_name(static_cast<Algorithm>(e.algo)));
  return buf;
}

Status mismatch_error(const PeerContext& peer, const Envelope& expect, size_t expect_bytes,
                      const Envelope& got, size_t got_bytes) {
  std::string msg = peer.describe() + " sent " + envelope_to_string(got) + " with " + std::to_string(got_bytes) +
                    " bytes, but rank " + std::to_string(peer.my_rank) + " expected " + envelope_to_string(expect) +
                    " with " + std::to_string(expect_bytes) + " bytes";
  Envelope other_algo = got;
  other_algo.algo = expect.algo;
  if (got.algo != expect.algo && other_algo.same_call(expect))  // the same call, chosen differently
    msg += " (the ranks chose different algorithms: the settings that choose them, marked job-wide by "
           "python -m uccl.info, must be the same on every rank)";
  return Status(Code::kMismatch, msg, peer.peer_rank);
}

Status peer_closed_error(const PeerContext& peer, const std::string& detail) {
  return Status(Code::kRemoteError, peer.describe() + " closed the connection" + (detail.empty() ? "" : " (" + detail + ")"),
                peer.peer_rank);
}

Status peer_failed_error(const PeerContext& peer, const std::string& root_cause) {
  return Status(Code::kRemoteError, peer.describe() + " failed and closed the connection", peer.peer_rank)
      .with_root_cause(root_cause);
}

namespace {
constexpr char kNoteMagic[4] = {'U', 'C', 'N', 'T'};
}

void send_close_note(int fd, const std::string& note) {
  const uint32_t len = static_cast<uint32_t>(std::min(note.size(), kMaxCloseNoteBytes));
  std::string frame(kNoteMagic, 4);
  frame.append(reinterpret_cast<const char*>(&len), 4);
  frame.append(note, 0, len);
  // One small write into an idle socket's empty buffer: it either fits whole or the peer
  // is gone anyway, so there is nothing to retry.
  (void)::send(fd, frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

std::string read_close_note(int fd) {
  char buf[8 + kMaxCloseNoteBytes];
  size_t got = 0;
  while (got < sizeof buf) {
    ssize_t n = ::recv(fd, buf + got, sizeof buf - got, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  uint32_t len = 0;
  if (got < 8 || std::memcmp(buf, kNoteMagic, 4) != 0) return "";
  std::memcpy(&len, buf + 4, 4);
  return std::string(buf + 8, std::min<size_t>({len, got - 8, kMaxCloseNoteBytes}));
}

}  // namespace uccl
