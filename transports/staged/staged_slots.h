// Shared staging slots: on one host a device chunk goes from the sender's device to the
// receiver's device through one slot of shared memory, with no host-to-host copy.
//
// Why: a staged pair on shm used to move each chunk device->host into a private pinned bounce
// buffer, then host->host into the receiver's bounce buffer (the shm endpoint's CMA copy, on a
// CPU), then host->device. The middle copy ran at one core's memcpy rate and bounded the whole
// path (2.9 GB/s busbw on an H200 whose PCIe moved 55 GB/s; RESULTS.md, the second GPU
// session). With a slot both ranks map, the sender's device->host copy lands where the
// receiver's host->device copy reads: the two copies that are left are DMA on a GPU.
//
// The protocol (a pair uses it when both ranks offered it in the connection's handshake,
// UCCL_STAGED_SHARED, and its transport is shm; staged_endpoint.h decides):
//  * The sender owns a SlotSegment, "/uccl-<pid>-<hex>" in /dev/shm (SharedMapping::create):
//    a header with one `consumed` word per slot, then `slots` page-aligned slots.
//  * A device chunk is copied into a free slot; once the copy is done the sender sends a
//    SlotNote (which slot, the chunk's sequence number and length, the segment's name) in place
//    of the chunk's bytes, as an ordinary message of the inner endpoint whose envelope carries
//    kSlotNoteMark in its mark. Envelope checks, ordering, any-source look-ahead and the failure
//    detection stay the inner endpoint's. Host chunks travel as plain messages (one CMA copy).
//  * The receiver does not know a chunk's form in advance (the sender's buffer decides): each
//    receive it posts takes the chunk's bytes or, as RecvRequest::alt_dst, a note (a message of
//    sizeof(SlotNote) bytes with the mark). So receives are posted ahead as on any pair, and a
//    host sender's large chunks may wait for theirs to be pushed (shm's CMA push). On a note it maps
//    the segment (PeerSlots, once), copies or reduces out of the slot, and when that is done
//    stores the note's sequence number in the slot's `consumed` word, then rings the header's
//    bell (base/futex_bell.h: a sender with no free slot sleeps on it). The sender reuses a slot
//    once its word holds the number it sent there.
//  * Failures: a dead receiver consumes nothing more: the sender's inner endpoint fails as
//    usual and its segment is unmapped. A dead sender's pages live on while the receiver maps
//    them, so a copy in flight finishes. The receiver unlinks the name once mapped, the sender
//    at teardown; a sender killed before that leaves a name that remove_stale_shared_files()
//    removes (same naming and lock as the shm transport's rings).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/futex_bell.h"
#include "base/shared_mapping.h"
#include "uccl/status.h"

namespace uccl {

constexpr uint8_t kSlotNoteMark = 0xA5;  // Envelope::mark of a message that is a SlotNote

struct SlotNote {
  uint64_t magic = 0;  // kSlotNoteMagic
  uint64_t seq = 0;    // from 1, per sending endpoint
  uint64_t bytes = 0;  // the chunk's length
  uint64_t segment_bytes = 0;
  uint32_t slot = 0;
  uint32_t reserved = 0;
  char segment[48] = {0};  // "/uccl-<pid>-<16 hex digits>"
};
constexpr uint64_t kSlotNoteMagic = 0x65746f6e746f6c73ull;  // "slotnote"

// The sender's side: the segment and its slots.
class SlotSegment {
 public:
  static Result<SlotSegment> create(size_t slots, size_t slot_bytes);
  SlotSegment() = default;
  SlotSegment(SlotSegment&&) = default;
  SlotSegment& operator=(SlotSegment&&) = default;

  size_t slots() const { return slots_; }
  char* slot(size_t i) const { return seg_.base() + data_offset_ + i * stride_; }
  // Whether the peer is done with what was sent in slot i as number seq.
  bool consumed(size_t i, uint64_t seq) const;
  // Rung by the peer after each consume: the sender sleeps on it while it waits for a slot.
  FutexBell* consumed_bell() const;
  // A note for chunk `seq` of `bytes` in slot i.
  SlotNote note(size_t i, uint64_t seq, size_t bytes) const;
  char* base() const { return seg_.base(); }
  size_t bytes() const { return seg_.total_bytes(); }

 private:
  SharedMapping seg_;
  size_t slots_ = 0, stride_ = 0, data_offset_ = 0;
};

// The receiver's side: the sender's segment, mapped on the first note (again if the sender
// made a new one). Registered with a device backend on first use by a device receive.
class PeerSlots {
 public:
  PeerSlots() = default;
  ~PeerSlots() { unmap(); }
  PeerSlots(const PeerSlots&) = delete;
  PeerSlots& operator=(const PeerSlots&) = delete;

  // The slot a note names, its fields checked (InvalidArgument / RemoteError saying what was
  // wrong); maps the segment if it is a new one. Only once the receiver's copies out of the
  // previous segment are done may a note name a new one: the sender makes a new one only after
  // every slot of the old one was consumed.
  Result<const char*> open(const SlotNote& note);
  // Tells the sender that the note's slot may be reused (the copies out of it are done).
  void consume(const SlotNote& note);
  // The mapping, for DeviceBackend::register_host; nullptr before the first note.
  char* base() const { return seg_.base(); }
  size_t bytes() const { return seg_.total_bytes(); }
  void unmap();
  // Hands the mapping over (to be unmapped once unregistered: DeviceBackend::unregister_host),
  // leaving this empty.
  SharedMapping take();
  // The mapping a note naming a new segment replaced, still mapped (it may be registered with a
  // device backend: the caller unregisters it before it goes); empty if none.
  SharedMapping take_retired() { return std::move(retired_); }

 private:
  SharedMapping seg_, retired_;
  std::string name_;
  size_t slots_ = 0, stride_ = 0, data_offset_ = 0;
};

}  // namespace uccl
