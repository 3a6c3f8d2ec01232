// The first bytes on every uccl data connection: who may connect.
//
// A connection is accepted only if it carries the magic, our protocol version, the per-job
// secret (random, published in the store by rank 0 of each communicator, so only processes
// that can read the job's store can join) and names this communicator and this rank. Anything
// else (a port scanner, a stray client, random bytes) is logged and closed; the job goes on.
//
// With a job key (bootstrap/auth.h) the secret never travels, and nothing is accepted without
// a proof of the key over fresh nonces from both sides:
//   accepting side, at accept():  Greeting {magic, version, its nonce}
//   connecting side:              HelloHeader (its own fresh nonce in `secret`),
//                                 kMacBytes = hello_mac(key, greeting nonce, header), offer
//   accepting side:               AckHeader, kMacBytes = ack_mac(key, both nonces, ack), body
// Each side checks the other's MAC in constant time. A hello with a wrong MAC is answered with
// an ack of code kUnauthenticated (unauthenticated itself: it only tells an honest rank with
// another key what happened) and closed. Liveness probes carry no MAC: they only make the
// receiver close the socket. Failure notices are hellos like the others (they fail a peer, so
// they must be authenticated).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "bootstrap/auth.h"

namespace uccl {

constexpr uint32_t kHelloMagic = 0x4c434355;  // "UCCL"
constexpr uint32_t kAckMagic = 0x4b434155;    // "UACK"
// 2: the staging offers travel in the hello and the ack (were in the PeerInfo, fixed when the
// communicator was made).
constexpr uint16_t kProtocolVersion = 2;
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
// HelloHeader::flags, every socket of a connection: its sockets run over several networks
// (the lanes of transports/path_choice.h pair_lanes; socket c over lane c), so both ends weigh
// them by the lanes' rates. Absent when the connecting side fell back to one address.
constexpr uint8_t kHelloStriped = 4;
constexpr uint32_t kMaxNoticeBytes = 1024;
// HelloHeader::flags / AckHeader::flags: this side takes staged chunks through shared-memory
// slots (UCCL_STAGED_SHARED; transports/staged/staged_slots.h).
constexpr uint8_t kHelloStagingShared = 8;
constexpr uint32_t kAckStagingShared = 1;

// The staging offers (transports/staged: UCCL_STAGED) are made when the connection is, not when
// the communicator is: connections are made on first use, and a program typically makes its
// communicator (init_process_group, uccl.init) before it touches its device. An offer fixed at
// creation left such a job's device pairs in whole mode (one bounce buffer per message, no
// pipelining: 2 ranks on shm, simulated device, a 1 MiB all_reduce 213 us whole against 144 us
// split, host buffers 115 us; benchmarks/RESULTS.md). The connecting side's offer is in its
// hello, the accepting side's in its ack (both of channel 0), and each side combines the same
// two numbers (ConnectionManager::wrap_staged).

struct HelloHeader {
  uint32_t magic;
  uint16_t version;
  uint8_t transport;  // TransportKind
  uint8_t flags;      // kHelloProbe, kHelloFailed, kHelloStriped, kHelloStagingShared
  uint8_t secret[kSecretBytes];
  uint64_t comm_id;
  int32_t from_rank;
  int32_t to_rank;
  uint32_t channel;    // index of this socket among the connection's sockets
  uint32_t nchannels;
  uint32_t offer_bytes;  // followed by the transport's offer (channel 0 only)
  uint64_t staging_chunk;  // the staging chunk this side offers now, 0 for none (channel 0)
};
struct AckHeader {
  uint32_t magic;
  uint32_t status;        // 0 = accepted, else a Code value; the text follows
  uint32_t answer_bytes;  // followed by the answer (or the error text)
  uint32_t flags;         // kAckStagingShared
  uint64_t staging_chunk;  // the staging chunk this side offers now, 0 for none (channel 0)
};
constexpr uint32_t kGreetingMagic = 0x47434355;  // "UCCG"
struct Greeting {
  uint32_t magic;
  uint16_t version;
  uint16_t pad;
  uint8_t nonce[kNonceBytes];
};
#pragma pack(pop)

// One side's staging offer (transports/staged): the chunk (UCCL_STAGED; 0: none) and whether it
// takes shared slots (UCCL_STAGED_SHARED). Put on and read off channel 0's hello or ack here only.
struct StagingOffer {
  size_t chunk = 0;
  bool shared = false;
};
inline void put_offer(HelloHeader* h, const StagingOffer& o) {
  h->staging_chunk = o.chunk;
  if (o.shared) h->flags |= kHelloStagingShared;
}
inline void put_offer(AckHeader* a, const StagingOffer& o) {
  a->staging_chunk = o.chunk;
  if (o.shared) a->flags |= kAckStagingShared;
}
inline StagingOffer offer_of(const HelloHeader& h) {
  return {static_cast<size_t>(h.staging_chunk), (h.flags & kHelloStagingShared) != 0};
}
inline StagingOffer offer_of(const AckHeader& a) {
  return {static_cast<size_t>(a.staging_chunk), (a.flags & kAckStagingShared) != 0};
}

// Whether a staging offer from a peer can be taken: 0 (none), or a multiple of 64 bytes (every
// element of every dtype stays whole in a chunk) from 4 KiB to 1 TiB (UCCL_STAGED_CHUNK_BYTES's
// floor; the bounce bytes, 4 chunks, cannot overflow).
bool valid_staging_chunk(uint64_t chunk);

// Keyed mode: a fresh greeting, and the MACs of the hello and of the ack (kMacBytes each).
Greeting make_greeting();
std::string hello_mac(const std::string& key, const uint8_t* greeting_nonce, const HelloHeader& h);
std::string ack_mac(const std::string& key, const uint8_t* greeting_nonce, const HelloHeader& h, const AckHeader& a);
// "" if a received greeting is acceptable, else why not.
std::string validate_greeting(const Greeting& g);

// Checks a received hello; returns "" if acceptable, else why not (for the log). secret ==
// nullptr in the keyed mode (the caller checked the MAC instead; the field is a nonce).
std::string validate_hello(const HelloHeader& h, const uint8_t* secret, uint64_t comm_id, int my_rank, int size);

}  // namespace uccl
