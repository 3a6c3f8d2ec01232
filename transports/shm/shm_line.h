// One-line messages and the seal that publishes a header line (see shm_endpoint.h, "Seals").
//
// Contract:
//  * Every header line ends with a 64-bit `seal`, written last with a release store, just
//    before the writer publishes `head` (so after a message's payload when it goes in one go):
//      bits 0..7 flags (MsgFlags), bits 8..15 the payload bytes of a kMsgLine message,
//      bit 16 kSealWhole: the payload lines that follow are complete too,
//      bits 32..63 the stamp kMsgMagic ^ (the line's ring position / 64), mod 2^32.
//    A line is a published header at reader position `pos` iff its seal's stamp is stamp(pos):
//    the header that sat on the same line one lap earlier has the stamp of pos - ring_bytes
//    (a ring has far fewer than 2^32 lines), and a never-written line is zero, which no stamp
//    is (kMsgMagic's bit 30 survives the XOR with any first-lap line number of a ring below
//    64 GiB).
//  * Payload lines carry arbitrary user bytes, which may look like any seal. The reader
//    therefore trusts a seal only where the line held a header (or nothing) in the previous lap,
//    which PayloadLines remembers, and asks the ring's `head` everywhere else. Exact, not
//    probabilistic: a stale payload line is never read as a message.
//
// Why: a small message used to touch three shared cache lines (header, payload, the `head`
// counter), each one a store-buffer drain and a cross-core transfer. A kMsgLine message carries
// up to kLineBytes of payload in the header fields it does not need (bytes, cma_address,
// cma_seq), so writer and reader share one line; the reader polls the seal at its tail instead
// of `head`, so the writer's `head` store stays in its own cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace uccl {
namespace shm {

constexpr uint32_t kMsgMagic = 0x4d4d4853;  // "SHMM": a header is where we expect one
constexpr uint64_t kLineBytes = 24;         // payload of a kMsgLine message: MsgHeader::bytes .. cma_seq

inline uint32_t line_stamp(uint64_t pos) { return kMsgMagic ^ static_cast<uint32_t>(pos >> 6); }
constexpr uint64_t kSealWhole = 1u << 16;
inline uint64_t make_seal(uint64_t pos, uint32_t flags, uint64_t line_bytes, bool whole = false) {
  return static_cast<uint64_t>(line_stamp(pos)) << 32 | (whole ? kSealWhole : 0) | line_bytes << 8 | flags;
}
inline bool seal_matches(uint64_t seal, uint64_t pos) { return static_cast<uint32_t>(seal >> 32) == line_stamp(pos); }
inline uint32_t seal_flags(uint64_t seal) { return static_cast<uint32_t>(seal & 0xff); }
inline uint64_t seal_line_bytes(uint64_t seal) { return (seal >> 8) & 0xff; }
inline bool seal_whole(uint64_t seal) { return seal & kSealWhole; }

// The reader's record of which ring lines held payload (not a header) when it last consumed
// them: one bit per line, private to the reader, touched once per message.
class PayloadLines {
 public:
  explicit PayloadLines(uint64_t ring_bytes) : mask_(ring_bytes / 64 - 1), bits_((ring_bytes / 64 + 63) / 64, 0) {}

  bool held_payload(uint64_t pos) const {
    const uint64_t i = (pos >> 6) & mask_;
    return (bits_[i >> 6] >> (i & 63)) & 1;
  }
  void header_at(uint64_t pos) {
    const uint64_t i = (pos >> 6) & mask_;
    bits_[i >> 6] &= ~(1ull << (i & 63));
  }
  // Lines [begin, end) (multiples of 64) held payload; a ring's worth or more marks every line.
  // A word (64 lines) at a time: this runs once per ring message, 8 KiB ones included.
  void payload(uint64_t begin, uint64_t end) {
    uint64_t n = (end - begin) >> 6;
    if (n > mask_) {
      for (uint64_t& w : bits_) w = ~0ull;
      return;
    }
    uint64_t i = (begin >> 6) & mask_;
    while (n > 0) {
      const uint64_t bit = i & 63, take = n < 64 - bit ? n : 64 - bit;
      bits_[i >> 6] |= (take == 64 ? ~0ull : ((1ull << take) - 1)) << bit;
      n -= take;
      i = (i + take) & mask_;
    }
  }

 private:
  uint64_t mask_;
  std::vector<uint64_t> bits_;
};

}  // namespace shm
}  // namespace uccl
