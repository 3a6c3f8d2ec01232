// The data path of ShmEndpoint: writing messages into the tx ring, reading (copying, reducing,
// or pulling with CMA) from the rx ring. See shm_endpoint.h for the protocol.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/reduce.h"
#include "base/stream_copy.h"
#include "transports/shm/shm_cma.h"
#include "transports/shm/shm_endpoint.h"

namespace uccl {
namespace shm {
namespace {

inline uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// Send side.

bool ShmEndpoint::tx_reserve(uint64_t bytes) {
  if (ring_bytes_ - (tx_head_ - tx_tail_cache_) >= bytes) return true;
  tx_tail_cache_ = tx_ctl_->tail.load(std::memory_order_acquire);
  return ring_bytes_ - (tx_head_ - tx_tail_cache_) >= bytes;
}

void ShmEndpoint::tx_publish() {
  if (tx_unsealed_) {  // the reader may be polling this word (shm_line.h)
    __atomic_store_n(&tx_unsealed_->seal, tx_seal_, __ATOMIC_RELEASE);
    tx_unsealed_ = nullptr;
  }
  if (tx_head_ == tx_published_) return;
  tx_ctl_->head.store(tx_head_, std::memory_order_release);
  tx_published_ = tx_head_;
}

void ShmEndpoint::copy_to_ring(uint64_t pos, const void* src, size_t n) {
  const size_t at = pos & ring_mask_;
  const size_t first = std::min<size_t>(n, ring_bytes_ - at);
  std::memcpy(tx_data_ + at, src, first);
  if (n > first) std::memcpy(tx_data_, static_cast<const char*>(src) + first, n - first);
}

bool ShmEndpoint::cma_send_enabled() {
  if (tx_cma_ == 0) {
    if (!opt_.cma) {
      tx_cma_ = 2;
    } else {
      tx_cma_ = ctl_->cma_verdict[side_].load(std::memory_order_acquire);  // stays 0 until probed
    }
  }
  return tx_cma_ == 1;
}

bool ShmEndpoint::send_step() {
  if (sendq_.empty()) return false;
  SendRequest* r = sendq_.front();
  if (!tx_in_message_) return send_start(r);
  return pushing_ ? push_chunk(r) : send_piece(r);
}

void ShmEndpoint::write_header(const SendRequest* r, uint32_t flags, uint64_t cma_seq, bool whole) {
  MsgHeader* h = reinterpret_cast<MsgHeader*>(tx_data_ + (tx_head_ & ring_mask_));
  h->env = r->env;
  if (flags == kMsgLine) {
    if (r->bytes) std::memcpy(line_payload(h), r->data, r->bytes);
  } else {
    h->bytes = r->bytes;
    h->cma_address = flags == kMsgCma ? reinterpret_cast<uintptr_t>(r->data) : 0;
    h->cma_seq = cma_seq;
  }
  tx_unsealed_ = h;
  tx_seal_ = make_seal(tx_head_, flags, flags == kMsgLine ? r->bytes : 0, whole);
  tx_head_ += kLine;
  ++tx_msgs_;
}

void ShmEndpoint::tee_copy(const SendRequest* r, size_t offset, size_t n) {
  if (!r->tee || n == 0) return;
  char* dst = static_cast<char*>(r->tee) + offset;
  const char* src = static_cast<const char*>(r->data) + offset;
  if (r->bytes >= opt_.tee_stream_min_bytes) {
    stream_copy(dst, src, n);  // nobody reads the copy soon, and it is far larger than the caches
  } else {
    std::memcpy(dst, src, n);
  }
}

bool ShmEndpoint::send_start(SendRequest* r) {
  const bool cma = r->bytes >= opt_.cma_min_bytes && (r->bytes <= opt_.cma_max_bytes || r->duplex) &&
                   r->bytes > 0 && cma_send_enabled();
  // Push only where this side also receives in the step: then both cores are busy with their
  // own copies either way, and the sender's copy reads from its own cache. A one-way message
  // is pulled, so the receiver copies while the sender goes on (a root's local copy):
  // broadcast 1 MiB on 2 ranks took 114 us pushed against 93 us pulled.
  // A final receive (SendRequest::to_final) offers itself from push_min_bytes.
  const bool push_size = cma || (r->to_final && r->bytes >= opt_.push_min_bytes && r->bytes > 0);
  if (push_size && r->duplex && push_enabled()) {
    switch (claim_offer(r)) {
      case Offer::kWait: return false;
      case Offer::kTaken:
        tx_in_message_ = pushing_ = true;
        tx_off_ = 0;
        return push_chunk(r);
      case Offer::kNone: break;
    }
  }
  const uint64_t padded = align_up(r->bytes, kLine);
  const bool line = !cma && r->bytes <= kLineBytes;        // the payload rides in the header
  const bool whole = !cma && !line && padded <= piece_;  // header and payload go out in one publish
  if (!tx_reserve(kLine + (whole ? padded : 0))) return false;

  // The payload before the header: the reader polls the header's line, and writing it first
  // would hand that line back and forth while the payload is copied (1 KiB exchanges took
  // 1.12 us instead of 0.95).
  if (whole && r->bytes) copy_to_ring(tx_head_ + kLine, r->data, r->bytes);
  write_header(r, cma ? kMsgCma : line ? kMsgLine : kMsgInline, cma ? ++cma_posted_ : 0, whole);
  if (whole) tx_head_ += padded;
  if (cma) {
    ++stats_.cma_sends;
  } else {
    ++stats_.ring_sends;
    stats_.line_sends += line;
  }
  if (cma || whole || line) {
    tx_publish();
    tee_copy(r, 0, r->bytes);  // the ring and pull paths copy in one go, once the message is out
    sendq_.pop_front();
    send_written(r, cma ? cma_posted_ : 0);
    return true;
  }
  tx_in_message_ = true;
  tx_off_ = 0;
  send_piece(r);  // the header is published together with the first piece
  tee_copy(r, 0, r->bytes);
  return true;
}

bool ShmEndpoint::send_piece(SendRequest* r) {
  const uint64_t remaining = r->bytes - tx_off_;
  const uint64_t n = std::min<uint64_t>(remaining, piece_);
  const uint64_t room = n == remaining ? align_up(n, kLine) : n;  // piece_ is a multiple of 64
  if (!tx_reserve(room)) {
    tx_publish();
    return false;
  }
  copy_to_ring(tx_head_, static_cast<const char*>(r->data) + tx_off_, n);
  tx_head_ += room;
  tx_off_ += n;
  tx_publish();
  if (tx_off_ == r->bytes) {
    tx_in_message_ = false;
    sendq_.pop_front();
    send_written(r, 0);
  }
  return true;
}

void ShmEndpoint::send_written(SendRequest* r, uint64_t cma_seq) {
  if (cma_seq == 0 && unacked_.empty()) {
    finish_send(r);  // the payload is in the ring: the caller may reuse its buffer
  } else {
    unacked_.push_back({r, cma_seq});  // completes in order, after the CMA pulls ahead of it
  }
}

bool ShmEndpoint::reap_sends() {
  const uint64_t done = tx_ctl_->cma_done.load(std::memory_order_acquire);
  bool any = false;
  while (!unacked_.empty() && unacked_.front().cma_seq <= done) {
    finish_send(unacked_.front().r);
    unacked_.pop_front();
    any = true;
  }
  return any;
}

void ShmEndpoint::finish_send(SendRequest* r) {
  counters_.bytes_sent += r->bytes;
  counters_.messages_sent += 1;
  complete(r);
}

// ---------------------------------------------------------------------------------------------
// Receive side.

uint64_t ShmEndpoint::rx_available(uint64_t want) {
  uint64_t avail = rx_head_cache_ - rx_tail_;
  if (avail >= want) return avail;
  // A seal may have shown a header that `head` does not count yet: the cache never goes back.
  rx_head_cache_ = std::max(rx_head_cache_, rx_ctl_->head.load(std::memory_order_acquire));
  return rx_head_cache_ - rx_tail_;
}

bool ShmEndpoint::recv_step() {
  if (recvq_.empty()) return false;
  RecvRequest* r = recvq_.front();
  if (!rx_in_message_) {
    // A payload of one line is combined when its header is read: wait for all of its turn.
    if (r->after && turn_limit(*r) < std::min<uint64_t>(r->bytes, kLineBytes)) return false;
    if (!recv_start(r)) return false;
    if (!rx_in_message_) return true;  // finished (zero bytes) or failed
  }
  return seal_flags(rx_hdr_.seal) == kMsgCma ? recv_cma_chunk(r) : recv_ring_piece(r);
}

// The seal of the line at the tail where that line held a header in the previous lap, else
// `head` (see shm_line.h): in a stream of small messages `head`'s line never leaves the writer.
bool ShmEndpoint::rx_header_ready() {
  if (rx_head_cache_ - rx_tail_ >= kLine) return true;
  if (rx_payload_lines_.held_payload(rx_tail_)) return rx_available(kLine) >= kLine;
  const auto* h = reinterpret_cast<const MsgHeader*>(rx_data_ + (rx_tail_ & ring_mask_));
  const uint64_t seal = __atomic_load_n(&h->seal, __ATOMIC_ACQUIRE);
  if (!seal_matches(seal, rx_tail_)) return false;
  // That much is published, whatever `head` says yet (recv_start checks the size).
  rx_head_cache_ = rx_tail_ + kLine;
  if (seal_whole(seal) && h->bytes <= ring_bytes_ - kLine) rx_head_cache_ += align_up(h->bytes, kLine);
  return true;
}

bool ShmEndpoint::recv_start(RecvRequest* r) {
  if (!rx_header_ready()) return false;
  std::memcpy(&rx_hdr_, rx_data_ + (rx_tail_ & ring_mask_), kLine);
  const uint32_t flags = seal_flags(rx_hdr_.seal);
  const bool cma = flags == kMsgCma;
  const uint64_t bytes = payload_bytes(rx_hdr_);
  if (!seal_matches(rx_hdr_.seal, rx_tail_) || flags > kMsgLine || (flags == kMsgLine && bytes > kLineBytes) ||
      (seal_whole(rx_hdr_.seal) && (flags != kMsgInline || bytes > ring_bytes_ - kLine)) ||
      (cma && rx_hdr_.cma_seq != cma_acked_ + 1)) {
    fatal(Status(Code::kRemoteError, peer_.describe() + ": corrupt shared memory ring (bad message header)",
                 peer_.peer_rank),
          "found a corrupt message header in the shared memory ring");
    return true;
  }
  if (r->alt_dst && rx_hdr_.env.mark == r->alt_mark && bytes == r->alt_bytes && rx_hdr_.env.same_call(r->expect)) {
    // The alternate form (RecvRequest::alt_dst): the receive now describes it. It is small
    // (never pulled or pushed), so an offer of the plain form for this message stays unclaimed
    // until the next offer in its slot replaces it.
    r->took_alt = true;
    r->dst = r->alt_dst;
    r->bytes = bytes;
    r->reduce = false;
    r->after = nullptr;
  }
  if (!rx_hdr_.env.same_call(r->expect) || bytes != r->bytes) {
    Status s = mismatch_error(peer_, r->expect, r->bytes, rx_hdr_.env, bytes);
    fatal(s, "detected a mismatch: " + s.message());
    return true;
  }
  if (cma && peer_gone_) {
    die(gone_status_);  // the payload lived in the dead process
    return true;
  }
  rx_payload_lines_.header_at(rx_tail_);
  rx_tail_ += kLine;
  if (flags == kMsgLine) {  // the payload came with the header
    if (bytes) deliver(r, 0, line_payload(&rx_hdr_), bytes);
    rx_ctl_->tail.store(rx_tail_, std::memory_order_release);
    ++stats_.ring_recvs;
    ++stats_.line_recvs;
    finish_recv(r);
    return true;
  }
  if (flags == kMsgPush) {  // the payload is already in r->dst
    rx_ctl_->tail.store(rx_tail_, std::memory_order_release);
    ++stats_.push_recvs;
    finish_recv(r);
    return true;
  }
  if (r->bytes == 0) {
    rx_ctl_->tail.store(rx_tail_, std::memory_order_release);
    ++stats_.ring_recvs;
    finish_recv(r);
    return true;
  }
  if (cma) rx_ctl_->tail.store(rx_tail_, std::memory_order_release);  // descriptor consumed
  rx_in_message_ = true;
  rx_off_ = 0;
  return true;
}

void ShmEndpoint::deliver(RecvRequest* r, size_t offset, const char* src, size_t n) {
  char* dst = static_cast<char*>(r->dst) + offset;
  if (!r->reduce) {
    std::memcpy(dst, src, n);
    return;
  }
  const char* acc = r->acc ? static_cast<const char*>(r->acc) + offset : dst;
  reduce(dst, acc, src, n / dtype_size(r->dtype), r->dtype, r->op);
}

bool ShmEndpoint::recv_ring_piece(RecvRequest* r) {
  const uint64_t remaining = r->bytes - rx_off_;
  const uint64_t want = std::min<uint64_t>(std::min<uint64_t>(remaining, piece_), turn_limit(*r) - rx_off_);
  uint64_t n = std::min<uint64_t>(rx_available(want), want);
  // The writer publishes whole pieces (multiples of 64) and the final remainder, so n is
  // already a whole number of elements; keep the reduction safe regardless.
  if (r->reduce) n -= n % dtype_size(r->dtype);
  if (n == 0) return false;
  const size_t at = rx_tail_ & ring_mask_;
  const size_t first = std::min<size_t>(n, ring_bytes_ - at);
  deliver(r, rx_off_, rx_data_ + at, first);
  if (n > first) deliver(r, rx_off_ + first, rx_data_, n - first);
  rx_off_ += n;
  r->delivered = rx_off_;
  rx_tail_ += n;
  const bool done = rx_off_ == r->bytes;
  if (done) rx_tail_ = align_up(rx_tail_, kLine);
  rx_ctl_->tail.store(rx_tail_, std::memory_order_release);
  if (done) {
    rx_payload_lines_.payload(rx_tail_ - align_up(r->bytes, kLine), rx_tail_);
    rx_in_message_ = false;
    ++stats_.ring_recvs;
    finish_recv(r);
  }
  return true;
}

bool ShmEndpoint::recv_cma_chunk(RecvRequest* r) {
  if (peer_gone_) {
    die(gone_status_);  // never read a dead pid: the number may already name another process
    return true;
  }
  const uint64_t remaining = std::min<uint64_t>(r->bytes, turn_limit(*r)) - rx_off_;
  if (remaining == 0) return false;  // an ordered receive whose turn has not come yet
  const uintptr_t src = rx_hdr_.cma_address + rx_off_;
  ssize_t got;
  if (!r->reduce) {
    char* dst = static_cast<char*>(r->dst) + rx_off_;
    got = cma_read(peer_pid_, dst, src, std::min<uint64_t>(remaining, opt_.cma_chunk_bytes));
  } else {
    if (!bounce_) {
      void* mem = std::aligned_alloc(kLine, opt_.cma_bounce_bytes);
      bounce_ = std::unique_ptr<char, void (*)(void*)>(static_cast<char*>(mem), std::free);
      if (!bounce_) {
        fatal(Status(Code::kSystemError, "out of memory for the shm CMA bounce buffer"), "ran out of memory");
        return true;
      }
    }
    got = cma_read(peer_pid_, bounce_.get(), src, std::min<uint64_t>(remaining, opt_.cma_bounce_bytes));
    if (got > 0) {
      got -= got % static_cast<ssize_t>(dtype_size(r->dtype));  // a partial element is read again
      deliver(r, rx_off_, bounce_.get(), static_cast<size_t>(got));
    }
  }
  if (got < 0) {
    if (got == -EINTR || got == -EAGAIN) return false;
    if (got == -ESRCH || (got == -EFAULT && peer_left_note())) {
      on_peer_gone();  // gone, or failed and gave its buffer back: its note says why
      return true;
    }
    fatal(Status(Code::kRemoteError,
                 peer_.describe() + ": process_vm_readv from the shared memory peer failed: " + std::strerror(-got),
                 peer_.peer_rank),
          std::string("could not read the message with process_vm_readv: ") + std::strerror(-got));
    return true;
  }
  if (got == 0) return false;
  rx_off_ += static_cast<uint64_t>(got);
  r->delivered = rx_off_;
  if (rx_off_ == r->bytes) {
    rx_ctl_->cma_done.store(++cma_acked_, std::memory_order_release);
    rx_in_message_ = false;
    ++stats_.cma_recvs;
    finish_recv(r);
  }
  return true;
}

void ShmEndpoint::finish_recv(RecvRequest* r) {
  recvq_.pop_front();
  r->delivered = r->bytes;
  counters_.bytes_received += r->bytes;
  complete(r);
}

}  // namespace shm
}  // namespace uccl
