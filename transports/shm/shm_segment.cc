#include "transports/shm/shm_segment.h"

#include <new>

namespace uccl {
namespace shm {

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics must be address-free");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared atomics must be address-free");

size_t effective_ring_bytes(size_t requested, size_t piece_bytes) {
  size_t min_bytes = 4 * piece_bytes;
  size_t want = requested < min_bytes ? min_bytes : requested;
  size_t ring = 4096;
  while (ring < want) ring <<= 1;
  return ring;
}

char* Segment::ring_data(int ring) const {
  return base() + kControlBytes + static_cast<size_t>(ring) * control()->ring_bytes;
}

Result<Segment> Segment::create(size_t ring_bytes) {
  const size_t total = kControlBytes + 2 * ring_bytes;
  Result<SharedMapping> r = SharedMapping::create(total);
  if (!r.ok()) return r.status();
  Segment seg(r.take());
  SegmentControl* c = new (seg.base()) SegmentControl;  // the pages are zero: atomics start at 0
  c->magic = kSegmentMagic;
  c->version = kSegmentVersion;
  c->ring_bytes = ring_bytes;
  c->total_bytes = total;
  return seg;
}

Result<Segment> Segment::open(const std::string& name, size_t total_bytes, size_t ring_bytes) {
  if (total_bytes != kControlBytes + 2 * ring_bytes)
    return InvalidArgument("inconsistent shared memory segment size in the offer");
  Result<SharedMapping> r = SharedMapping::open(name, total_bytes);
  if (!r.ok()) return r.status();
  Segment seg(r.take());
  const SegmentControl* c = seg.control();
  if (c->magic != kSegmentMagic || c->version != kSegmentVersion || c->ring_bytes != ring_bytes ||
      c->total_bytes != total_bytes)
    return Status(Code::kRemoteError, "shared memory segment " + name + " has an unexpected header");
  return seg;
}

}  // namespace shm
}  // namespace uccl
