// The staged endpoint (see staged_endpoint.h for the why and the rules): settings, the sending
// side and failure. The bounce slots and their memory are staged_pool.cc; the receiving side
// is staged_receive.cc.
#include "transports/staged/staged_endpoint.h"

#include <algorithm>
#include <cstring>

#include "base/net.h"
#include "base/signal_safe_memory.h"

namespace uccl {

const TextSetting kStaged("staged", "UCCL_STAGED", "auto",
                          "split every message of a pair into staging chunks (device memory pipelined through "
                          "pinned bounce buffers): auto = when a device backend may own memory when the pair "
                          "connects (on first use), on, off (device buffers are then staged whole)",
                          one_of({"auto", "on", "off"}));
const BytesSetting kStagedChunk("staged", "UCCL_STAGED_CHUNK_BYTES", "auto",
                                "staging chunk: the pipeline's unit (the smaller of the two ranks' values); auto = "
                                "what the device backends that may own memory here ask for (cuda 8M), else 512K",
                                bytes_or_auto(4096));
const BytesSetting kStagedBounce("staged", "UCCL_STAGED_BOUNCE_BYTES", "auto",
                                 "bounce buffers per staged connection (half per direction, at least 2 chunks each); "
                                 "auto = 4 chunks, at least 8M",
                                 bytes_or_auto(8192));

const TextSetting kStagedShared("staged", "UCCL_STAGED_SHARED", "on",
                                 "on one host (shm), device chunks go through shared-memory slots the peer reads "
                                 "directly, with no host-to-host copy (when both ranks say on)",
                                 one_of({"on", "off"}));


bool staged_shared_offer() { return kStagedShared.get() == "on"; }

size_t staged_chunk_wanted(bool idle_too) {
  if (size_t set = kStagedChunk.get()) return set / 64 * 64;
  size_t chunk = 0, idle = 0;
  for (DeviceBackend* b : device_backends()) {
    std::string why;
    if (!b->available(&why)) continue;
    size_t& to = b->may_own_memory() ? chunk : idle;
    to = std::max(to, b->staging_chunk_bytes() / 64 * 64);
  }
  if (!chunk && idle_too) chunk = idle;
  return chunk ? chunk : kStagedDefaultChunk;
}

size_t staged_offer() {
  const std::string& mode = kStaged.get();
  if (mode == "off") return 0;
  if (mode == "on" || any_device_memory()) return staged_chunk_wanted(mode == "on");
  return 0;
}

size_t staged_bounce_for(size_t chunk) {
  if (size_t set = kStagedBounce.get()) return set;
  return std::max<size_t>(8u << 20, 4 * chunk);
}


StagedEndpoint::StagedEndpoint(std::unique_ptr<Endpoint> inner, size_t chunk, size_t bounce_bytes, bool shared,
                               int peer_rank, std::string why_whole)
    : inner_(std::move(inner)), chunk_(chunk),
      slots_per_dir_(chunk ? std::max<size_t>(2, bounce_bytes / 2 / chunk) : 1),
      shared_(shared && chunk > 0 && inner_->takes_alternates()), peer_rank_(peer_rank),
      why_whole_(std::move(why_whole)) {}

StagedEndpoint::~StagedEndpoint() {
  free_slots(out_);
  free_slots(in_);
  release_peer_slots();
}

std::string StagedEndpoint::describe() const {
  // Whether each side's slots are registered for DMA (cuda) or copied as pageable memory: the
  // difference between PCIe speed and a fraction of it.
  auto slots = [&] {
    return std::string(", shared slots: ours ") + (out_seg_registered_ ? "pinned" : "pageable") + ", the peer's " +
           (peer_slots_registered_ ? "pinned" : "pageable");
  };
  std::string s = (chunk_ ? "staged (chunks of " + std::to_string(chunk_) + " bytes" + (shared_ ? slots() : "") +
                                ") over "
                          : "staged (whole messages" + (why_whole_.empty() ? "" : ": " + why_whole_) + ") over ") +
                  inner_->describe();
  const ChunkTimes& t = times_;
  auto us = [](double sum, uint64_t n) { return std::to_string(static_cast<long long>(sum / n * 1e6 + 0.5)); };
  if (t.sent)
    s += "; per chunk sent (" + std::to_string(t.sent) + "), mean us: to host " + us(t.to_host, t.sent) +
         ", to the peer " + us(t.to_peer, t.sent) + ", waiting for a slot " + us(t.slot_wait, t.sent);
  if (t.received)
    s += "; per chunk received (" + std::to_string(t.received) + "), mean us: arriving " +
         us(t.data_wait, t.received) + ", to the device " + us(t.to_device, t.received);
  if (t.hops) s += "; " + std::to_string(t.hops) + " chunks through a pinned hop (their slot was pageable)";
  return s;
}

void StagedEndpoint::queue(Dir& d, SendRequest* s, RecvRequest* r, size_t bytes, const void* buf) {
  if (failed_) {
    fail(s ? static_cast<Request*>(s) : r, why_failed_);
    return;
  }
  MemoryLoc loc = bytes > 0 && any_device_memory() ? locate_memory(buf) : MemoryLoc{};
  if (chunk_ == 0 && !loc.is_device() && d.ops.empty()) {
    // Whole mode, host memory, nothing queued before it: the plain path.
    if (s) inner_->post_send(s);
    else inner_->post_recv(r);
    return;
  }
  Op op;
  op.s = s;
  op.r = r;
  op.loc = loc;
  const size_t unit = chunk_ ? chunk_ : std::max<size_t>(bytes, 1);
  const size_t n = bytes == 0 ? 1 : (bytes + unit - 1) / unit;
  op.chunks.resize(n);
  for (size_t i = 0; i < n; ++i) {
    op.chunks[i].off = i * unit;
    op.chunks[i].len = std::min(unit, bytes - std::min(bytes, i * unit));
  }
  d.ops.push_back(std::move(op));
  advance(d, s != nullptr);
}

// Pending from here on, as every endpoint does: callers re-post the same request (the tiny plan,
// core/schedule_tiny.cc) and would otherwise see the last run's state (its receive "done" at once).
void StagedEndpoint::post_send(SendRequest* r) {
  r->state = ReqState::kPending;
  r->consumed = 0;
  queue(out_, r, nullptr, r->bytes, r->data);
}
void StagedEndpoint::post_recv(RecvRequest* r) {
  r->state = ReqState::kPending;
  r->delivered = 0;
  queue(in_, nullptr, r, r->bytes, r->dst);
}

bool StagedEndpoint::chunk_free(const Op& op, const Chunk& c) {
  if (op.s) {  // (a feeder that failed feeds nothing: the operation fails with its error)
    const RecvRequest* f = op.s->fed_by;
    return !f || f->state == ReqState::kDone || f->delivered >= c.off + c.len;
  }
  const SendRequest* g = op.r->guard;
  if (!g || !g->pending()) return true;
  // Free when the chunk's bytes lie outside what the send has still to read.
  const uintptr_t lo = reinterpret_cast<uintptr_t>(op.r->dst) + c.off, hi = lo + c.len;
  const uintptr_t unread = reinterpret_cast<uintptr_t>(g->data) + g->consumed;
  return c.len == 0 || hi <= unread || lo >= reinterpret_cast<uintptr_t>(g->data) + g->bytes;
}

void StagedEndpoint::finish(Op& op, bool is_send) {
  Request* user = is_send ? static_cast<Request*>(op.s) : op.r;
  if (!user->pending()) return;
  if (!op.gone.ok() && op.error.ok()) op.error = inner_->peer_farewell();  // Op::gone: its reason, once said
  if (!op.error.ok()) fail(user, op.error);
  else if (!op.gone.ok() && now_s() - op.gone_at >= kGoneWaitS) fail(user, op.gone);
  else if (op.gone.ok() && op.finished == op.chunks.size()) complete(user);
}

bool StagedEndpoint::advance_op(Dir& d, Op& op, bool is_send, bool may_post) {
  bool moved = false;
  const size_t n = op.chunks.size();
  if (shared_ && !is_send) return advance_shared_recv(d, op, may_post);
  if (!op.loc.is_device()) {
    // Host memory: the chunks go straight from / to the user's buffer.
    if (may_post && op.posted < n && op.error.ok()) {
      for (; op.posted < n; ++op.posted) {
        Chunk& c = op.chunks[op.posted];
        if (!chunk_free(op, c)) break;  // posting ahead: bytes not fed (read) yet
        if (is_send) {
          c.s.data = static_cast<const char*>(op.s->data) + c.off;
          c.s.bytes = c.len;
          c.s.env = op.s->env;
          c.s.duplex = op.s->duplex;
          inner_->post_send(&c.s);
        } else {
          c.r.dst = static_cast<char*>(op.r->dst) + c.off;
          c.r.bytes = c.len;
          c.r.expect = op.r->expect;
          c.r.reduce = op.r->reduce;
          c.r.acc = op.r->acc ? static_cast<const char*>(op.r->acc) + c.off : nullptr;
          c.r.dtype = op.r->dtype;
          c.r.op = op.r->op;
          inner_->post_recv(&c.r);
        }
        c.stage = Stage::kPosted;
        moved = true;
      }
      op.started = op.posted;
    }
    while (op.finished < op.posted) {
      Chunk& c = op.chunks[op.finished];
      Request& q = is_send ? static_cast<Request&>(c.s) : c.r;
      if (q.pending()) break;
      if (q.state == ReqState::kFailed) keep_first_error(op, q);
      if (op.error.ok()) (is_send ? op.s->consumed : op.r->delivered) = c.off + c.len;
      c.stage = Stage::kDone;
      ++op.finished;
      moved = true;
    }
    finish(op, is_send);
    return moved;
  }

  // Device memory: through the bounce slots.
  if (may_post && op.error.ok() && op.started < n) {
    Status s = ensure_device(op.loc);
    if (!s.ok() && s.code() != Code::kTimeout) op.error = s;
  }
  const bool ready = backend_ == op.loc.backend && ordinal_ == op.loc.ordinal && out_.stream;
  if (is_send && ready && out_seg_) register_once(op, out_seg_->base(), out_seg_->bytes(), &out_seg_registered_);
  if (is_send) {
    // 1. device -> host copies into free slots, in order.
    while (ready && may_post && op.error.ok() && op.started < n) {
      Chunk& c = op.chunks[op.started];
      if (!chunk_free(op, c)) break;  // posting ahead: the receive has not delivered these bytes yet
      Slot* sl = acquire(d, c.len);
      if (!sl) {
        // (Waiting for the peer to consume shared slots with nothing posted on the inner
        // endpoint: progress() asks it whether the peer lives, check_peer_alive.)
        if (op.starved_since == 0) op.starved_since = now_s();
        break;
      }
      c.slot = sl;
      c.t = now_s();
      if (op.starved_since != 0) {
        times_.slot_wait += c.t - op.starved_since;
        op.starved_since = 0;
      }
      size_t hop_bytes = 0;
      char* hop = hop_for(sl, sl->host, &hop_bytes);
      const char* src = static_cast<const char*>(op.s->data) + c.off;
      Status s;
      if (hop && hop_bytes < c.len) {  // the device's hop: by pieces, now
        c.hop = false;
        s = copy_out_by_pieces(d, sl, hop, SignalSafeMemory::kMinBlock, src, c.len);
      } else {
        c.hop = hop != nullptr;
        s = device_copy_async(backend_, hop ? hop : sl->host, src, c.len, CopyDir::kDeviceToHost, d.stream.get());
      }
      if (s.ok()) s = backend_->record(sl->ev.get(), d.stream.get());
      c.stage = Stage::kCopying;
      ++op.started;
      moved = true;
      if (!s.ok()) op.error = s.with_context("staging a send to the host");
    }
    // 2. a chunk whose copy finished goes on the wire (events of one stream finish in order).
    while (op.posted < op.started) {
      Chunk& c = op.chunks[op.posted];
      Result<bool> q = backend_->query(c.slot->ev.get());
      if (!q.ok()) {
        if (op.error.ok()) op.error = q.status().with_context("staging a send to the host");
      } else if (!q.value()) {
        break;
      }
      if (op.error.ok()) {
        if (c.hop) std::memcpy(c.slot->host, c.slot->hop, c.len);  // the CPU's half of the hop
        op.s->consumed = c.off + c.len;  // the device's bytes are read (a receive posted ahead may land there)
        const double now = now_s();
        times_.to_host += now - c.t;
        c.t = now;
        c.s.env = op.s->env;
        c.s.duplex = op.s->duplex && !c.slot->in_segment;  // a note is never pushed
        if (c.slot->in_segment) {  // the peer reads the slot: send the note
          c.slot->seq = ++next_seq_;
          c.note = out_seg_->note(c.slot->index, c.slot->seq, c.len);
          c.via_slot = true;
          c.s.data = &c.note;
          c.s.bytes = sizeof(SlotNote);
          c.s.env.mark = kSlotNoteMark;
        } else {
          c.s.data = c.slot->host;
          c.s.bytes = c.len;
        }
        inner_->post_send(&c.s);
        c.stage = Stage::kPosted;
      } else {
        c.s.state = ReqState::kFailed;  // never posted: treated as a failed sub-request below
        c.s.error = op.error;
      }
      ++op.posted;
      moved = true;
    }
    // 3. sent chunks give their slot back.
    while (op.finished < op.posted) {
      Chunk& c = op.chunks[op.finished];
      if (c.s.pending()) break;
      if (c.s.state == ReqState::kFailed) {
        keep_first_error(op, c.s);
      } else {
        times_.to_peer += now_s() - c.t;
        ++times_.sent;
      }
      if (c.via_slot) unconsumed_.push_back(c.slot);  // free again once the peer consumed it
      else release(d, c.slot);
      c.stage = Stage::kDone;
      ++op.finished;
      moved = true;
    }
  } else if (advance_device_recv(d, op, ready, may_post)) {
    moved = true;
  }
  finish(op, is_send);
  return moved;
}

void StagedEndpoint::register_once(Op& op, char* base, size_t bytes, DeviceBackend** registered) {
  // At most one try per op: cuda registers only while no stream waits on a signal (the slots
  // may have been made during such a wait), and until then copies read them as pageable memory.
  if (*registered || op.register_tried) return;
  op.register_tried = true;
  if (backend_->register_host(base, bytes)) *registered = backend_;
}

bool StagedEndpoint::advance(Dir& d, bool is_send) {
  bool moved = false, may_post = true;
  for (Op& op : d.ops) {
    moved |= advance_op(d, op, is_send, may_post);
    if (op.posted < op.chunks.size() && op.error.ok()) may_post = false;
  }
  // An op leaves when its user request is final and no chunk of it is still in flight.
  while (!d.ops.empty()) {
    Op& op = d.ops.front();
    const bool user_final = !(op.s ? static_cast<Request*>(op.s) : op.r)->pending();
    if (!user_final || op.finished < op.posted || op.posted < op.started) break;
    if (op.error.ok() && op.finished < op.chunks.size()) break;
    d.ops.pop_front();
    moved = true;
  }
  return moved;
}

bool StagedEndpoint::progress() {
  bool moved = inner_->progress();
  moved |= advance(in_, false);
  moved |= advance(out_, true);
  counters_ = inner_->counters();
  if (!moved && !inner_->has_pending() && (!out_.ops.empty() || !in_.ops.empty())) {
    const double now = now_s();  // at most once a millisecond: a peek may cost a system call
    if (now - alive_checked_at_ >= 1e-3) {
      alive_checked_at_ = now;
      check_peer_alive();
    }
  }
  return moved;
}

void StagedEndpoint::check_peer_alive() {
  Envelope env;
  size_t bytes = 0;
  Result<bool> alive = inner_->peek(&env, &bytes);
  if (alive.ok() || alive.status().code() == Code::kNotSupported) return;
  for (Dir* d : {&out_, &in_}) {
    for (Op& op : d->ops) {
      if (op.error.ok()) op.error = alive.status();
    }
  }
  advance(in_, false);
  advance(out_, true);
}

bool StagedEndpoint::device_busy(const Dir& d) {
  return d.dedicated_busy || (!d.ops.empty() && d.free_slots.size() != d.pool.size());
}

void StagedEndpoint::arm_wait(WaitSet* ws) {
  // Device copies ring their stream's bell where it has one (a simulated device's worker);
  // others signal nothing a driver can sleep on: poll while any is queued.
  for (Dir* d : {&out_, &in_}) {
    if (!device_busy(*d)) continue;
    FutexBell* bell = d->stream ? d->stream->completion_bell() : nullptr;
    if (!bell) {
      ws->poll_only = true;
      continue;
    }
    ws->futexes.push_back({bell->word(), bell->arm()});
    armed_.push_back(bell);
  }
  // Shared slots not given back yet: the peer rings the segment's bell when it gives one back.
  if (out_seg_ && !unconsumed_.empty()) {
    FutexBell* bell = out_seg_->consumed_bell();
    ws->futexes.push_back({bell->word(), bell->arm()});
    armed_.push_back(bell);
  }
  inner_->arm_wait(ws);
}

void StagedEndpoint::disarm_bells() {
  for (FutexBell* bell : armed_) bell->disarm();
  armed_.clear();
}

void StagedEndpoint::disarm_wait() {
  disarm_bells();
  inner_->disarm_wait();
}

bool StagedEndpoint::has_pending() const {
  return !out_.ops.empty() || !in_.ops.empty() || inner_->has_pending();
}

void StagedEndpoint::fail_all(const Status& why) {
  failed_ = true;
  why_failed_ = why;
  inner_->fail_all(why);
  for (Dir* d : {&out_, &in_}) {
    for (Op& op : d->ops) {
      Request* user = op.s ? static_cast<Request*>(op.s) : op.r;
      if (user->pending()) fail(user, why);
    }
    d->ops.clear();
  }
  // The copies already queued finish (they are finite), then every bounce buffer goes.
  free_slots(out_);
  free_slots(in_);
  release_peer_slots();
}

}  // namespace uccl
