// CMA push: receive offers, the sender's claim and chunked process_vm_writev, and the
// receiver's revocation when it fails. See "CMA push" in shm_endpoint.h for the protocol.
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/log.h"
#include "transports/shm/shm_cma.h"
#include "transports/shm/shm_endpoint.h"

namespace uccl {
namespace shm {
namespace {

constexpr uint64_t kStateMask = 3;
inline uint64_t offer_tag(uint64_t msg) { return (msg + 1) << 2; }
inline size_t slot_of_tag(uint64_t tag) { return ((tag >> 2) - 1) % kPushOfferSlots; }

// How long a failing receiver waits for a writer that already claimed one of its offers to
// stop. The writer checks for Cancel before every chunk (a few tens of microseconds apart)
// whenever its engine makes progress; the bound only matters if the writer's process is
// stopped, and then we warn instead of hanging the failure path.
constexpr double kCancelWaitSeconds = 2.0;

double now_seconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

}  // namespace

bool ShmEndpoint::push_enabled() {
  if (tx_push_ == 0) {
    // Writing into the peer takes the same ptrace permission as reading it, which our own
    // setup probe proved (the verdict we stored for the ring we read); the peer's cma=1 in
    // the offer/answer, part of that verdict, says it allows it.
    tx_push_ = !(opt_.cma && opt_.cma_push) ? 2 : ctl_->cma_verdict[1 - side_].load(std::memory_order_acquire);
  }
  return tx_push_ == 1;
}

// ---------------------------------------------------------------------------------------------
// Receiver: offers.

void ShmEndpoint::offer_push(uint64_t msg, const RecvRequest* r) {
  PushOffer& o = rx_ctl_->offers[msg % kPushOfferSlots];
  uint64_t cur = o.msg.load(std::memory_order_acquire);
  // An older offer still open in this slot is withdrawn (that message then goes by pull); one
  // the writer claimed stays its own until Finished, and this receive goes without an offer.
  if (cur != 0 && (cur & kStateMask) == kPushOffered && !o.msg.compare_exchange_strong(cur, 0)) return;
  if (cur != 0 && ((cur & kStateMask) == kPushClaimed || (cur & kStateMask) == kPushCancel)) return;
  o.msg.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  o.address.store(reinterpret_cast<uintptr_t>(r->dst), std::memory_order_relaxed);
  o.bytes.store(r->bytes, std::memory_order_relaxed);
  uint64_t words[4];
  std::memcpy(words, &r->expect, sizeof words);
  for (int i = 0; i < 4; ++i) o.expect[i].store(words[i], std::memory_order_relaxed);
  o.msg.store(offer_tag(msg) | kPushOffered, std::memory_order_release);
}

void ShmEndpoint::revoke_offers() {
  double deadline = 0;
  for (PushOffer& o : rx_ctl_->offers) {
    uint64_t cur = o.msg.load(std::memory_order_acquire);
    while (cur != 0 && (cur & kStateMask) != kPushFinished) {
      const uint64_t state = cur & kStateMask;
      if (state == kPushOffered) {
        if (o.msg.compare_exchange_weak(cur, 0)) break;
        continue;
      }
      if (state == kPushClaimed) {
        if (o.msg.compare_exchange_weak(cur, (cur & ~kStateMask) | kPushCancel)) ring_peer();  // it may sleep
        continue;
      }
      // Cancel requested: the writer is mid-push. A writer that is gone writes no more.
      if (peer_gone_ || peer_seems_gone()) break;
      if (deadline == 0) deadline = now_seconds() + kCancelWaitSeconds;
      if (now_seconds() > deadline) {
        UCCL_WARN("shm endpoint to %s: the peer did not stop writing into a failed receive within %.0f s; "
                  "do not reuse that buffer while the peer runs",
                  peer_.describe().c_str(), kCancelWaitSeconds);
        return;
      }
      cur = o.msg.load(std::memory_order_acquire);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Sender: claim and push.

ShmEndpoint::Offer ShmEndpoint::claim_offer(const SendRequest* r) {
  const uint64_t msg = tx_msgs_;
  if (tx_ctl_->recvs_posted.load(std::memory_order_acquire) <= msg) return Offer::kWait;
  PushOffer& o = tx_ctl_->offers[msg % kPushOfferSlots];
  uint64_t cur = o.msg.load(std::memory_order_acquire);
  if (cur != (offer_tag(msg) | kPushOffered)) return Offer::kNone;  // none, or withdrawn
  const uint64_t address = o.address.load(std::memory_order_relaxed);
  const uint64_t bytes = o.bytes.load(std::memory_order_relaxed);
  uint64_t words[4];
  for (int i = 0; i < 4; ++i) words[i] = o.expect[i].load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  // The slot unchanged since we read it (a rewrite passes through 0) means the fields above
  // are the offer's, and the slot is ours until we mark it Finished.
  if (!o.msg.compare_exchange_strong(cur, offer_tag(msg) | kPushClaimed)) return Offer::kNone;
  Envelope expect;
  std::memcpy(&expect, words, sizeof words);
  push_tag_ = offer_tag(msg);
  if (bytes != r->bytes || !expect.same_call(r->env) || address == 0) {
    end_push();  // not this message: the pull header lets the receiver report the mismatch
    return Offer::kNone;
  }
  push_address_ = address;
  return Offer::kTaken;
}

void ShmEndpoint::end_push() {
  tx_ctl_->offers[slot_of_tag(push_tag_)].msg.store(push_tag_ | kPushFinished, std::memory_order_release);
  pushing_ = false;
}

bool ShmEndpoint::push_chunk(SendRequest* r) {
  if (tx_off_ < r->bytes) {
    const PushOffer& o = tx_ctl_->offers[slot_of_tag(push_tag_)];
    if (o.msg.load(std::memory_order_acquire) == (push_tag_ | kPushCancel)) {
      end_push();  // the receiver failed: its note says why
      on_peer_gone();
      return true;
    }
    const uint64_t n = std::min<uint64_t>(r->bytes - tx_off_, opt_.push_chunk_bytes);
    const char* src = static_cast<const char*>(r->data) + tx_off_;
    // The tee copy reads the chunk into cache, and the write reads it from there.
    tee_copy(r, tx_off_, n);
    const ssize_t got = cma_write(peer_pid_, push_address_ + tx_off_, src, n);
    if (got == -EINTR || got == -EAGAIN || got == 0) return false;
    if (got < 0) {
      end_push();
      if (got == -ESRCH || (got == -EFAULT && peer_left_note())) {
        on_peer_gone();
      } else {
        fatal(Status(Code::kRemoteError,
                     peer_.describe() + ": process_vm_writev into the shared memory peer failed: " + std::strerror(-got),
                     peer_.peer_rank),
              std::string("could not write the message with process_vm_writev: ") + std::strerror(-got));
      }
      return true;
    }
    tx_off_ += static_cast<uint64_t>(got);
    if (tx_off_ < r->bytes) return true;
  }
  if (!tx_reserve(kLine)) return false;  // all written; the header follows when there is room
  end_push();
  write_header(r, kMsgPush, 0);
  tx_publish();
  ++stats_.push_sends;
  tx_in_message_ = false;
  sendq_.pop_front();
  send_written(r, 0);
  return true;
}

}  // namespace shm
}  // namespace uccl
