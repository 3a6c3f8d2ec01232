// Shared staging slots (see staged_slots.h for the protocol and the why).
#include "transports/staged/staged_slots.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace uccl {
namespace {

constexpr uint64_t kHeaderMagic = 0x32746f6c736c6363ull;  // "cclslot2" in memory order
constexpr size_t kLine = 64;

// The segment's first line, then one line per slot holding its `consumed` word.
struct SlotHeader {
  uint64_t magic;
  uint64_t slots;
  uint64_t stride;
  uint64_t data_offset;
  FutexBell consumed_bell;  // the sender sleeps on it; the receiver rings it after a consume
};
static_assert(sizeof(SlotHeader) <= kLine, "the header is the segment's first line");

size_t page_size() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }
size_t round_up(size_t v, size_t to) { return (v + to - 1) / to * to; }

std::atomic<uint64_t>* consumed_word(char* base, size_t i) {
  return reinterpret_cast<std::atomic<uint64_t>*>(base + kLine * (1 + i));
}

}  // namespace

Result<SlotSegment> SlotSegment::create(size_t slots, size_t slot_bytes) {
  if (slots == 0 || slot_bytes == 0) return InvalidArgument("staged slots: need at least one slot of some bytes");
  const size_t page = page_size();
  SlotSegment s;
  s.slots_ = slots;
  s.stride_ = round_up(slot_bytes, page);
  s.data_offset_ = round_up(kLine * (1 + slots), page);
  Result<SharedMapping> seg = SharedMapping::create(s.data_offset_ + slots * s.stride_);
  if (!seg.ok()) return seg.status();
  s.seg_ = seg.take();
  auto* h = reinterpret_cast<SlotHeader*>(s.seg_.base());  // zero pages: every consumed word is 0
  h->magic = kHeaderMagic;
  h->slots = slots;
  h->stride = s.stride_;
  h->data_offset = s.data_offset_;
  return s;
}

bool SlotSegment::consumed(size_t i, uint64_t seq) const {
  return consumed_word(seg_.base(), i)->load(std::memory_order_acquire) == seq;
}

FutexBell* SlotSegment::consumed_bell() const { return &reinterpret_cast<SlotHeader*>(seg_.base())->consumed_bell; }

SlotNote SlotSegment::note(size_t i, uint64_t seq, size_t bytes) const {
  SlotNote n;
  n.magic = kSlotNoteMagic;
  n.seq = seq;
  n.bytes = bytes;
  n.segment_bytes = seg_.total_bytes();
  n.slot = static_cast<uint32_t>(i);
  std::snprintf(n.segment, sizeof n.segment, "%s", seg_.name().c_str());
  return n;
}

Result<const char*> PeerSlots::open(const SlotNote& note) {
  if (note.magic != kSlotNoteMagic) return Status(Code::kRemoteError, "staged: a slot note with a bad magic number");
  const std::string name(note.segment, strnlen(note.segment, sizeof note.segment));
  if (!seg_.base() || name != name_) {
    // A bad note leaves the current mapping alone: it is replaced only by a good one.
    Result<SharedMapping> seg = SharedMapping::open(name, note.segment_bytes);
    if (!seg.ok()) return seg.status().with_context("staged: mapping the peer's slots");
    SharedMapping m = seg.take();
    m.unlink();  // mapped: the name is no longer needed
    const auto* h = reinterpret_cast<const SlotHeader*>(m.base());
    if (h->magic != kHeaderMagic || h->slots == 0 || h->data_offset + h->slots * h->stride != note.segment_bytes)
      return Status(Code::kRemoteError, "staged: the peer's slot segment " + name + " has an unexpected header");
    if (seg_.base()) retired_ = std::move(seg_);
    seg_ = std::move(m);
    name_ = name;
    slots_ = h->slots;
    stride_ = h->stride;
    data_offset_ = h->data_offset;
  }
  if (note.segment_bytes != seg_.total_bytes())
    return Status(Code::kRemoteError, "staged: a slot note says its segment " + name + " has " +
                                          std::to_string(note.segment_bytes) + " bytes; it has " +
                                          std::to_string(seg_.total_bytes()));
  if (note.slot >= slots_ || note.bytes > stride_)
    return Status(Code::kRemoteError, "staged: a slot note names slot " + std::to_string(note.slot) + " of " +
                                          std::to_string(note.bytes) + " bytes; the segment has " +
                                          std::to_string(slots_) + " slots of " + std::to_string(stride_));
  return static_cast<const char*>(seg_.base() + data_offset_ + note.slot * stride_);
}

void PeerSlots::consume(const SlotNote& note) {
  if (!seg_.base() || note.slot >= slots_) return;
  consumed_word(seg_.base(), note.slot)->store(note.seq, std::memory_order_release);
  reinterpret_cast<SlotHeader*>(seg_.base())->consumed_bell.ring();
}

void PeerSlots::unmap() {
  seg_ = SharedMapping();
  retired_ = SharedMapping();
  name_.clear();
  slots_ = stride_ = data_offset_ = 0;
}

SharedMapping PeerSlots::take() {
  SharedMapping s = std::move(seg_);
  unmap();
  return s;
}

}  // namespace uccl
