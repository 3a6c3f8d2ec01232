// The shared segment: one POSIX shm object per connection holding both directions' rings.
//
// Layout (all offsets fixed by this header; both processes run the same build):
//   [0, 4 KiB)        SegmentControl: identity, per-ring CMA verdicts, per-side close reasons,
//                     then one RingControl per direction
//   [4 KiB, +ring)    ring 0 data: active -> passive
//   [.., +ring)       ring 1 data: passive -> active
//
// Why these choices:
//  * One segment, created by the active side only: a single name to unlink, and the passive side
//    unlinks it too (ENOENT ignored), so whichever finishes setup first removes it from /dev/shm.
//  * Head (written by the writer) and tail (written by the reader) sit 128 bytes apart: Intel's
//    adjacent-line prefetcher moves 128-byte pairs, so 64 bytes apart would still ping-pong.
//  * The space is reserved with posix_fallocate: tmpfs would otherwise accept ftruncate and
//    deliver SIGBUS on first touch when /dev/shm is small (docker's default is 64 MiB).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/futex_bell.h"
#include "base/shared_mapping.h"
#include "uccl/status.h"
#include "transports/transport.h"

namespace uccl {
namespace shm {

constexpr uint64_t kSegmentMagic = 0x316d68736c636375ull;  // "ucclshm1"
constexpr uint32_t kSegmentVersion = 4;  // 4: sealed headers, one-line messages (shm_line.h)
constexpr uint32_t kPushOfferSlots = 8;  // receives a reader may offer ahead of the writer
constexpr size_t kControlBytes = 4096;

// One direction's counters. Monotonic 64-bit byte counts never wrap in practice (584 years at
// 1 TB/s), so "free space" is ring_bytes - (head - tail) without any wrap bookkeeping.
// A receive the reader posted, offered to the writer for a CMA push (see shm_endpoint.h).
// `msg` is ((message number + 1) << 2) | PushState, 0 while empty or being rewritten; it
// decides who owns the slot, so the reader never reuses one the writer is pushing into.
enum PushState : uint64_t { kPushOffered = 0, kPushClaimed = 1, kPushCancel = 2, kPushFinished = 3 };
struct PushOffer {
  alignas(64) std::atomic<uint64_t> msg;
  std::atomic<uint64_t> address;  // where the receive's bytes go, in the reader's memory
  std::atomic<uint64_t> bytes;
  std::atomic<uint64_t> expect[4];  // the receive's Envelope, as words (read racing a rewrite)
};
static_assert(sizeof(Envelope) == 4 * sizeof(uint64_t), "an Envelope fills PushOffer::expect");

struct RingControl {
  alignas(128) std::atomic<uint64_t> head;  // writer: bytes published
  alignas(128) std::atomic<uint64_t> tail;  // reader: bytes consumed
  std::atomic<uint64_t> cma_done;           // reader: CMA messages fully pulled (acks the sender)
  std::atomic<uint64_t> recvs_posted;       // reader: receives posted (message numbers offered up to)
  PushOffer offers[kPushOfferSlots];        // reader: offers[m % slots] for message m
};

// Why an endpoint shut its liveness socket, so that the peer's error can say more than "exited".
struct CloseNote {
  std::atomic<uint32_t> set;  // 0: nothing written (the process exited or crashed)
  char text[1000];  // a root cause carried on (see kMaxCloseNoteBytes) fits whole
};

// Sleeping instead of spinning (core/idle_wait.h): bell[s] belongs to side s, which arms its
// `futex` (base/futex_bell.h) before it sleeps; the other side rings it after anything it wrote
// into the segment (head, tail, acks, offers, notes). A side that never sleeps costs the other
// one fence and one read of a shared line.
// `cpu` is where side s last spun waiting (+1; 0 unknown): a peer that spins on the same cpu
// yields instead, or neither would run until the scheduler's time slice ends (unpinned ranks).
struct Doorbell {
  alignas(64) FutexBell futex;
  std::atomic<uint32_t> cpu;
};

struct SegmentControl {
  uint64_t magic;
  uint32_t version;
  uint32_t reserved;
  uint64_t ring_bytes;
  uint64_t total_bytes;
  // Per ring: may its reader pull from its writer with process_vm_readv? 0 = not probed yet
  // (the writer uses the ring meanwhile), 1 = yes, 2 = no. Written by the reader after its probe.
  std::atomic<uint32_t> cma_verdict[2];
  CloseNote close_note[2];  // indexed by side: 0 = active, 1 = passive
  RingControl ring[2];      // 0: active -> passive, 1: passive -> active
  Doorbell bell[2];         // indexed by side: the one that sleeps on it
};
static_assert(sizeof(SegmentControl) <= kControlBytes, "control block must fit its page");

// A mapped segment (a SharedMapping laid out as above). Movable, unmaps on destruction.
class Segment : public SharedMapping {
 public:
  Segment() = default;
  explicit Segment(SharedMapping m) : SharedMapping(std::move(m)) {}

  // Active side: a fresh segment "/uccl-<pid>-<random>" with two rings of ring_bytes each.
  static Result<Segment> create(size_t ring_bytes);
  // Passive side: maps an existing segment and checks that it is what the offer said.
  static Result<Segment> open(const std::string& name, size_t total_bytes, size_t ring_bytes);

  SegmentControl* control() const { return reinterpret_cast<SegmentControl*>(base()); }
  char* ring_data(int ring) const;
  size_t ring_bytes() const { return control()->ring_bytes; }
};

// Stale segments of dead creators (base/shared_mapping.h).
inline int remove_stale_segments(double min_age_s = 60) { return remove_stale_shared_files(min_age_s); }

// Rounds a requested ring size to what the segment uses: a power of two, at least 4 pieces.
size_t effective_ring_bytes(size_t requested, size_t piece_bytes);

}  // namespace shm
}  // namespace uccl
