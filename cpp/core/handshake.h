// The first bytes on every uccl data connection: who may connect.
//
// A connection is accepted only if it carries the magic, our protocol version, the per-job
// secret (random, published in the store by rank 0 of each communicator, so only processes
// that can read the job's store can join) and names this communicator and this rank. Anything
// else (a port scanner, a stray client, random bytes) is logged and closed; the job goes on.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace uccl {

constexpr uint32_t kHelloMagic = 0x4c434355;  // "UCCL"
constexpr uint32_t kAckMagic = 0x4b434155;    // "UACK"
constexpr uint16_t kProtocolVersion = 1;
constexpr uint32_t kMaxOfferBytes = 64 * 1024;
constexpr size_t kSecretBytes = 16;

#pragma pack(push, 1)
// HelloHeader::flags: a liveness probe from a higher rank still waiting for this rank to
// connect (it is authenticated like a hello, then closed without a word).
constexpr uint8_t kHelloProbe = 1;
// HelloHeader::flags: a failure notice. A failing rank sends one to each peer it has no
// connection with; the offer bytes are its root cause (at most kMaxNoticeBytes), and it may
// come from any rank (not only a lower one). Then the socket is closed.
constexpr uint8_t kHelloFailed = 2;
constexpr uint32_t kMaxNoticeBytes = 1024;

struct HelloHeader {
  uint32_t magic;
  uint16_t version;
  uint8_t transport;  // TransportKind
  uint8_t flags;      // kHelloProbe, kHelloFailed
  uint8_t secret[kSecretBytes];
  uint64_t comm_id;
  int32_t from_rank;
  int32_t to_rank;
  uint32_t channel;    // index of this socket among the connection's sockets
  uint32_t nchannels;
  uint32_t offer_bytes;  // followed by the transport's offer (channel 0 only)
};
struct AckHeader {
  uint32_t magic;
  uint32_t status;        // 0 = accepted, else a Code value; the text follows
  uint32_t answer_bytes;  // followed by the answer (or the error text)
};
#pragma pack(pop)

// Checks a received hello; returns "" if acceptable, else why not (for the log).
std::string validate_hello(const HelloHeader& h, const uint8_t* secret, uint64_t comm_id, int my_rank, int size);

}  // namespace uccl
