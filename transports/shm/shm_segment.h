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

#include "core/status.h"

namespace uccl {
namespace shm {

constexpr uint64_t kSegmentMagic = 0x316d68736c636375ull;  // "ucclshm1"
constexpr uint32_t kSegmentVersion = 1;
constexpr size_t kControlBytes = 4096;

// One direction's counters. Monotonic 64-bit byte counts never wrap in practice (584 years at
// 1 TB/s), so "free space" is ring_bytes - (head - tail) without any wrap bookkeeping.
struct RingControl {
  alignas(128) std::atomic<uint64_t> head;  // writer: bytes published
  alignas(128) std::atomic<uint64_t> tail;  // reader: bytes consumed
  std::atomic<uint64_t> cma_done;           // reader: CMA messages fully pulled (acks the sender)
};

// Why an endpoint shut its liveness socket, so that the peer's error can say more than "exited".
struct CloseNote {
  std::atomic<uint32_t> set;  // 0: nothing written (the process exited or crashed)
  char text[1000];  // a root cause carried on (see kMaxCloseNoteBytes) fits whole
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
};
static_assert(sizeof(SegmentControl) <= kControlBytes, "control block must fit its page");

// A mapped segment. Movable, unmaps on destruction; unlink() removes the name (idempotent).
class Segment {
 public:
  Segment() = default;
  Segment(Segment&& o) noexcept { *this = std::move(o); }
  Segment& operator=(Segment&& o) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment();

  // Active side: a fresh segment "/uccl-<pid>-<random>" with two rings of ring_bytes each.
  static Result<Segment> create(size_t ring_bytes);
  // Passive side: maps an existing segment and checks that it is what the offer said.
  static Result<Segment> open(const std::string& name, size_t total_bytes, size_t ring_bytes);

  void unlink();  // removes the name; ENOENT (the peer was first) is fine
  const std::string& name() const { return name_; }
  size_t total_bytes() const { return bytes_; }
  SegmentControl* control() const { return static_cast<SegmentControl*>(base_); }
  char* ring_data(int ring) const;
  size_t ring_bytes() const { return control()->ring_bytes; }

 private:
  void* base_ = nullptr;
  size_t bytes_ = 0;
  std::string name_;
  bool linked_ = false;
};

// Removes "/dev/shm/uccl-<pid>-*" left behind by a creator that died between start_connect()
// and finish() (the only window in which a name exists). Conservative on purpose: only our
// own files, only when <pid> no longer exists, and only when older than `min_age_s`, so that a
// live setup in another pid namespace sharing /dev/shm is never touched. Returns the count.
int remove_stale_segments(double min_age_s = 60);

// Rounds a requested ring size to what the segment uses: a power of two, at least 4 pieces.
size_t effective_ring_bytes(size_t requested, size_t piece_bytes);

}  // namespace shm
}  // namespace uccl
