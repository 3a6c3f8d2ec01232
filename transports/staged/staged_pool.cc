// The staged endpoint's bounce slots (see staged_endpoint.h, "Bounded and released"): the pools
// of each direction, the shared slot segment and the peer's mapping of its own, the device
// temporaries and pinned hops, and the process-wide count of all that memory.
#include "transports/staged/staged_endpoint.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "base/log.h"
#include "base/signal_safe_memory.h"

namespace uccl {

namespace {
std::atomic<size_t> g_bounce_bytes{0};

// A pool's size while pinned memory is scarce (acquire): two slots keep a chunk on the wire
// while the next one is copied.
constexpr size_t kScarcePoolSlots = 2;

// The last-resort hop of a device for the whole process (hop_for): made pinned once, then kept.
struct DeviceHop {
  std::mutex mu;  // held while a chunk moves through it by pieces
  char* block = nullptr;
};
// The device hop of (b, ordinal), making its block where it has none yet (nullptr when the
// backend hands out only memory no kernel reaches now: tried again on the next call). The first
// endpoint bound to the device makes it (ensure_device), before the pools spend the reserve.
DeviceHop* device_hop(DeviceBackend* b, int ordinal) {
  static std::mutex mu;
  static auto* hops = new std::map<std::pair<DeviceBackend*, int>, DeviceHop>();  // process lifetime
  std::lock_guard<std::mutex> lock(mu);
  DeviceHop& h = (*hops)[{b, ordinal}];
  if (!h.block) {
    auto m = b->alloc_pinned(SignalSafeMemory::kMinBlock);
    if (!m.ok()) return nullptr;
    if (!b->kernel_view_of_host(m.value(), ordinal)) {
      b->free_pinned(m.value());
      return nullptr;
    }
    h.block = static_cast<char*>(m.value());  // kept for the process's life
  }
  return &h;
}

// Unregisters host memory from the backend it was registered with, then unmaps it (perhaps
// later: DeviceBackend::unregister_host).
template <typename Mapping>
void release_mapping(DeviceBackend* registered, char* base, Mapping&& m) {
  auto owned = std::make_shared<std::decay_t<Mapping>>(std::move(m));
  if (!registered) return;  // unmapped as `owned` goes
  registered->unregister_host(base, [owned] { *owned = std::decay_t<Mapping>(); });
}
}  // namespace

size_t staged_bounce_bytes() { return g_bounce_bytes.load(); }

void StagedEndpoint::release_peer_slots() {
  char* base = peer_slots_.base();
  if (base) release_mapping(peer_slots_registered_, base, peer_slots_.take());
  peer_slots_registered_ = nullptr;
}

void StagedEndpoint::retire_peer_mapping() {
  SharedMapping retired = peer_slots_.take_retired();
  if (!retired.base()) return;
  char* base = retired.base();
  release_mapping(peer_slots_registered_, base, std::move(retired));
  peer_slots_registered_ = nullptr;
}

void StagedEndpoint::drop_slot(std::unique_ptr<Slot>& s) {
  if (!s) return;
  if (!s->in_segment) backend_->free_pinned(s->host);
  g_bounce_bytes -= s->bytes;
  if (s->dev) {
    backend_->free(s->dev);
    g_bounce_bytes -= s->bytes;
  }
  if (s->hop) {
    backend_->free_pinned(s->hop);
    g_bounce_bytes -= s->bytes;
  }
  s.reset();
}

void StagedEndpoint::free_slots(Dir& d) {
  disarm_bells();  // they may be this direction's stream's or segment's
  if (d.stream && backend_) backend_->synchronize(d.stream.get());  // queued copies may still write
  for (auto& s : d.pool) drop_slot(s);
  d.pool.clear();
  d.free_slots.clear();
  drop_slot(d.dedicated);
  d.dedicated_busy = false;
  d.stream.reset();
  if (&d == &out_) {
    unconsumed_.clear();
    if (out_seg_) release_mapping(out_seg_registered_, out_seg_->base(), std::move(*out_seg_));
    out_seg_.reset();
    out_seg_registered_ = nullptr;
  }
}

Status StagedEndpoint::map_slots() {
  Result<SlotSegment> seg = SlotSegment::create(slots_per_dir_, chunk_);
  if (!seg.ok()) return seg.status();
  std::vector<std::unique_ptr<Slot>> slots;
  for (size_t i = 0; i < seg.value().slots(); ++i) {
    auto e = backend_->create_event();
    if (!e.ok()) return e.status();  // nothing kept: the segment goes with `seg`
    auto sl = std::make_unique<Slot>();
    sl->host = seg.value().slot(i);
    sl->bytes = chunk_;
    sl->in_segment = true;
    sl->index = i;
    sl->ev = e.take();
    slots.push_back(std::move(sl));
  }
  out_seg_ = std::make_unique<SlotSegment>(seg.take());
  if (backend_->register_host(out_seg_->base(), out_seg_->bytes())) out_seg_registered_ = backend_;
  for (auto& sl : slots) {
    g_bounce_bytes += chunk_;
    out_.free_slots.push_back(sl.get());
    out_.pool.push_back(std::move(sl));
  }
  return Status::Ok();
}

void StagedEndpoint::reap_consumed() {
  for (size_t i = 0; i < unconsumed_.size();) {
    Slot* sl = unconsumed_[i];
    if (out_seg_->consumed(sl->index, sl->seq)) {
      out_.free_slots.push_back(sl);
      unconsumed_[i] = unconsumed_.back();
      unconsumed_.pop_back();
    } else {
      ++i;
    }
  }
}

Status StagedEndpoint::ensure_device(const MemoryLoc& loc) {
  if (backend_ == loc.backend && ordinal_ == loc.ordinal && out_.stream && in_.stream) return Status::Ok();
  if (backend_) {
    // Another device: switch only when nothing of the old one is in flight.
    if (out_seg_) reap_consumed();
    auto idle = [](const Dir& d) { return d.free_slots.size() == d.pool.size() && !d.dedicated_busy; };
    if (!idle(out_) || !idle(in_)) return Status(Code::kTimeout, "busy");  // try again later
    free_slots(out_);
    free_slots(in_);
  }
  backend_ = loc.backend;
  ordinal_ = loc.ordinal;
  auto so = backend_->create_stream(ordinal_);
  if (!so.ok()) return so.status();
  auto si = backend_->create_stream(ordinal_);
  if (!si.ok()) return si.status();
  out_.stream = so.take();
  in_.stream = si.take();
  if (copies_by_kernel(backend_)) device_hop(backend_, ordinal_);  // now, while the reserve has blocks
  return Status::Ok();
}

StagedEndpoint::Slot* StagedEndpoint::acquire(Dir& d, size_t len) {
  if (chunk_ == 0 || len > chunk_) {  // whole mode: one message-sized slot per direction
    if (d.dedicated_busy) return nullptr;
    if (!d.dedicated || d.dedicated->bytes < len) {
      drop_slot(d.dedicated);
      auto s = std::make_unique<Slot>();
      auto h = backend_->alloc_pinned(len);
      auto e = backend_->create_event();
      if (!h.ok() || !e.ok()) return nullptr;
      s->host = static_cast<char*>(h.value());
      s->bytes = len;
      s->pooled = false;
      s->ev = e.take();
      g_bounce_bytes += len;
      d.dedicated = std::move(s);
    }
    d.dedicated_busy = true;
    return d.dedicated.get();
  }
  if (shared_ && &d == &out_ && !slots_broken_) {
    if (!out_seg_) {
      Status st = map_slots();
      if (!st.ok()) {
        // The receiver takes plain chunks as well: send them that way (one more host copy).
        UCCL_WARN("staged: no shared slots for rank %d (%s); sending chunks as plain messages", peer_rank_,
                  st.message().c_str());
        slots_broken_ = true;
      }
    }
    if (out_seg_) reap_consumed();
  }
  if (d.free_slots.empty()) {
    if (d.pool.size() >= slots_per_dir_) return nullptr;
    // While pinned memory is scarce (a stream waits on a signal: the backend's bounded reserve),
    // a pool keeps to a pipeline's minimum, so that every connection and direction gets slots
    // (and hops) a kernel reaches: one receiving ahead must not take them all from the peer it
    // sends to (the ring of a collective would then wait on itself).
    const bool scarce = copies_by_kernel(backend_) && backend_->pinned_scarce();
    if (!scarce) d.grow_refused = false;
    if (scarce && (d.pool.size() >= kScarcePoolSlots || (d.grow_refused && !d.pool.empty()))) return nullptr;
    auto s = std::make_unique<Slot>();
    auto h = backend_->alloc_pinned(chunk_);
    if (!h.ok()) return nullptr;
    // Where uccl's copies run as kernels, a slot no kernel reaches (while a stream waits on a
    // signal, pinned memory past the backend's reserve comes pageable) would take a hop for
    // each of its chunks, and past the reserve's blocks none is left for a hop either: its
    // copies would go by the engines, behind a user's copy that waits for this very operation
    // (device.h). A pool that has slots waits for one of them to come back instead.
    if (!d.pool.empty() && copies_by_kernel(backend_) && !backend_->kernel_view_of_host(h.value(), ordinal_)) {
      backend_->free_pinned(h.value());
      d.grow_refused = scarce;  // no second try each pass while it lasts
      return nullptr;
    }
    auto e = backend_->create_event();
    if (!e.ok()) {
      backend_->free_pinned(h.value());
      return nullptr;
    }
    s->host = static_cast<char*>(h.value());
    s->bytes = chunk_;
    s->ev = e.take();
    g_bounce_bytes += chunk_;
    d.free_slots.push_back(s.get());
    d.pool.push_back(std::move(s));
  }
  Slot* s = d.free_slots.back();
  d.free_slots.pop_back();
  return s;
}

Status StagedEndpoint::device_temp(Slot* s) {
  if (s->dev) return Status::Ok();
  auto dv = backend_->alloc(ordinal_, s->bytes);
  if (!dv.ok()) return dv.status();
  s->dev = dv.value();
  g_bounce_bytes += s->bytes;
  return Status::Ok();
}

char* StagedEndpoint::hop_for(Slot* s, const void* host, size_t* bytes) {
  if (!copies_by_kernel(backend_) || backend_->kernel_view_of_host(host, ordinal_)) return nullptr;
  // The slot's own hop only where pinned memory is not scarce: shared slots are many (a
  // segment's worth), and each taking a block of the reserve left none for the next connection.
  if (!s->hop && !backend_->pinned_scarce()) {
    auto h = backend_->alloc_pinned(s->bytes);
    if (h.ok() && backend_->kernel_view_of_host(h.value(), ordinal_)) {
      s->hop = static_cast<char*>(h.value());
      g_bounce_bytes += s->bytes;
    } else if (h.ok()) {
      backend_->free_pinned(h.value());  // pageable past the pinned reserve
    }
  }
  char* hop = s->hop;
  if (!hop) {
    DeviceHop* h = device_hop(backend_, ordinal_);
    hop = h ? h->block : nullptr;
  }
  // The device's hop serves one chunk at a time: its user moves the chunk through it by pieces,
  // now (a size of 0 says so), where the slot's own hop lets the copy run async.
  *bytes = s->hop ? s->bytes : 0;
  if (hop) ++times_.hops;
  return hop;
}

std::unique_lock<std::mutex> StagedEndpoint::hop_lock(const char* hop) {
  if (!hop) return {};
  DeviceHop* h = device_hop(backend_, ordinal_);
  if (!h || h->block != hop) return {};
  return std::unique_lock<std::mutex>(h->mu);
}

Status StagedEndpoint::copy_out_by_pieces(Dir& d, Slot* sl, char* hop, size_t hop_bytes, const char* src, size_t len) {
  std::unique_lock<std::mutex> lock = hop_lock(hop);
  for (size_t off = 0; off < len; off += hop_bytes) {
    const size_t n = std::min(hop_bytes, len - off);
    UCCL_RETURN_IF_ERROR(device_copy_async(backend_, hop, src + off, n, CopyDir::kDeviceToHost, d.stream.get()));
    UCCL_RETURN_IF_ERROR(backend_->synchronize(d.stream.get()));
    std::memcpy(sl->host + off, hop, n);
  }
  return Status::Ok();
}

void StagedEndpoint::release(Dir& d, Slot* s) {
  if (!s->pooled) d.dedicated_busy = false;
  else d.free_slots.push_back(s);
}

}  // namespace uccl
