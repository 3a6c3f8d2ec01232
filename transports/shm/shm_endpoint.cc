// ShmEndpoint life cycle: posting, the progress loop, liveness and failure handling.
// The byte-moving code is in shm_endpoint_io.cc.
#include "transports/shm/shm_endpoint.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/log.h"

namespace uccl {
namespace shm {
namespace {

// Upper bound of steps per progress() call, so one busy endpoint cannot starve the others the
// engine drives (each step moves at most one piece or one CMA chunk per direction).
constexpr int kMaxStepsPerProgress = 64;

// Milliseconds from the coarse clock: read from the vDSO page, no syscall, ~1-4 ms resolution.
inline int64_t coarse_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

}  // namespace

ShmEndpoint::ShmEndpoint(ShmEndpointParams p)
    : peer_(std::move(p.peer)),
      segment_(std::move(p.segment)),
      ctl_(segment_.control()),
      side_(p.side),
      fd_(p.liveness_fd),
      peer_pid_(p.peer_pid),
      opt_(p.options),
      rx_payload_lines_(segment_.ring_bytes()) {
  ring_bytes_ = segment_.ring_bytes();
  ring_mask_ = ring_bytes_ - 1;
  // The active side chose the ring size; our pieces must leave room for the reader's.
  piece_ = std::min<uint64_t>(opt_.piece_bytes, ring_bytes_ / 4) & ~(kLine - 1);
  tx_ctl_ = &ctl_->ring[side_];
  tx_data_ = segment_.ring_data(side_);
  rx_ctl_ = &ctl_->ring[1 - side_];
  rx_data_ = segment_.ring_data(1 - side_);
  last_poll_ms_ = coarse_ms();
  // A forked child of the peer (a DataLoader worker, say) inherits its end of the socket and
  // keeps it open after the peer dies. A pidfd sees the peer process itself exit. Only when
  // the setup probe read the peer's random word from that pid do we know the number names it.
  if (p.peer_pid_verified) {
#ifdef SYS_pidfd_open
    pidfd_ = static_cast<int>(syscall(SYS_pidfd_open, peer_pid_, 0));
#endif
  }
}

ShmEndpoint::~ShmEndpoint() {
  if (!dead_ && !peer_gone_) leave_note("closed its endpoint");
  if (fd_ >= 0) close(fd_);
  if (pidfd_ >= 0) close(pidfd_);
  // segment_ unmaps itself; the name was unlinked during setup.
}

void ShmEndpoint::post_send(SendRequest* r) {
  r->state = ReqState::kPending;
  if (dead_) return fail(r, dead_status_);
  if (peer_gone_) return fail(r, gone_status_);
  if (r->bytes > 0 && r->data == nullptr)
    return fail(r, InvalidArgument("shm send of " + std::to_string(r->bytes) + " bytes from a null buffer"));
  sendq_.push_back(r);
  // Eager: a lone small message leaves right now instead of at the next progress() call. A
  // large one waits for it: pushing or writing it here would hold back whatever the caller
  // posts next, such as the receive whose offer the peer may be waiting for.
  if (sendq_.size() == 1 && r->bytes < opt_.cma_min_bytes && send_step()) ring_peer();
}

void ShmEndpoint::post_recv(RecvRequest* r) {
  r->state = ReqState::kPending;
  r->took_alt = false;
  if (dead_) return fail(r, dead_status_);
  if (r->bytes > 0 && r->dst == nullptr)
    return fail(r, InvalidArgument("shm receive of " + std::to_string(r->bytes) + " bytes into a null buffer"));
  if (r->reduce) {
    if (!dtype_valid(static_cast<int>(r->dtype)) || !redop_valid(static_cast<int>(r->op)))
      return fail(r, InvalidArgument("shm reduce receive with an invalid dtype or op"));
    if (r->bytes % dtype_size(r->dtype) != 0)
      return fail(r, InvalidArgument("shm reduce receive of " + std::to_string(r->bytes) +
                                     " bytes is not a whole number of " + dtype_name(r->dtype) + " elements"));
  }
  recvq_.push_back(r);
  // Message numbers match receives to sends (both FIFO); a sender waiting to push message m
  // learns from recvs_posted that receive m exists, and from offers[] whether it may push.
  const uint64_t msg = rx_posted_++;
  const size_t push_min = r->final ? opt_.push_min_bytes : opt_.cma_min_bytes;
  if (opt_.cma && opt_.cma_push && !r->reduce && r->bytes >= push_min && r->bytes > 0) offer_push(msg, r);
  rx_ctl_->recvs_posted.store(rx_posted_, std::memory_order_release);
  if (peer_gone_) drain_after_peer_gone();
  // A sender waits for a posted receive only to push (claim_offer): a large message, or a
  // smaller one it expects a final receive for. It may sleep then. Smaller receives skip the
  // ring's fence (one per 8-byte all_reduce step).
  else if (r->bytes >= opt_.push_min_bytes) ring_peer();
}

bool ShmEndpoint::progress() {
  if (dead_) return false;
  bool any = false;
  for (int step = 0; step < kMaxStepsPerProgress; ++step) {
    // One piece each way per step: a bidirectional exchange keeps both rings moving and can
    // never wait on its own full ring while the peer waits on the other.
    bool moved = send_step();
    moved |= recv_step();
    if (!unacked_.empty()) moved |= reap_sends();
    if (!moved || dead_) break;
    any = true;
  }
  if (any) ring_peer();
  if (!dead_ && !peer_gone_ && has_pending()) check_liveness();
  return any;
}

Result<bool> ShmEndpoint::peek(Envelope* env, size_t* bytes) {
  if (!dead_) progress();
  if (dead_) return dead_status_;
  // Whole messages a peer published before it went away are still delivered, so look first.
  if (recvq_.empty() && !rx_in_message_ && rx_header_ready()) {
    MsgHeader h;
    std::memcpy(&h, rx_data_ + (rx_tail_ & ring_mask_), kLine);
    if (!seal_matches(h.seal, rx_tail_)) {
      fatal(Status(Code::kRemoteError, peer_.describe() + ": corrupt shared memory ring (bad message header)",
                   peer_.peer_rank),
            "found a corrupt message header in the shared memory ring");
      return dead_status_;
    }
    *env = h.env;
    *bytes = static_cast<size_t>(payload_bytes(h));
    return true;
  }
  if (!peer_gone_) check_liveness();  // progress() checks only while requests are pending
  if (peer_gone_) return gone_status_;
  return false;
}

// ---------------------------------------------------------------------------------------------
// Sleeping (Doorbell in shm_segment.h).

void ShmEndpoint::arm_wait(WaitSet* ws) {
  // A dead peer rings nothing: look now (one poll() per sleep), not after 16 more passes.
  if (!dead_ && !peer_gone_ && peer_seems_gone()) on_peer_gone();
  ws->futexes.push_back({ctl_->bell[side_].futex.word(), ctl_->bell[side_].futex.arm()});
}

void ShmEndpoint::disarm_wait() { ctl_->bell[side_].futex.disarm(); }

void ShmEndpoint::ring_peer() { ctl_->bell[1 - side_].futex.ring(); }

// ---------------------------------------------------------------------------------------------
// Liveness.

void ShmEndpoint::check_liveness() {
  if (++liveness_calls_ % 16 != 0) return;  // even the coarse clock is a visible cost per pass
  const int64_t ms = coarse_ms();
  if (ms == last_poll_ms_) return;
  last_poll_ms_ = ms;
  if (peer_seems_gone()) on_peer_gone();
}

bool ShmEndpoint::peer_seems_gone() {
  pollfd fds[2] = {{fd_, POLLIN | POLLRDHUP, 0}, {pidfd_, POLLIN, 0}};
  if (poll(fds, pidfd_ >= 0 ? 2 : 1, 0) <= 0) return false;
  const pollfd& p = fds[0];
  bool gone = (p.revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL)) || (pidfd_ >= 0 && fds[1].revents);
  if (!gone && (p.revents & POLLIN)) {
    char buf[256];
    ssize_t n = recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      gone = true;
    } else if (n > 0 && !warned_data_) {
      warned_data_ = true;  // nobody should write here; ignore it rather than guess
      UCCL_WARN("shm endpoint to %s: ignoring unexpected data on the liveness socket", peer_.describe().c_str());
    }
  }
  return gone;
}

Status ShmEndpoint::peer_gone_status() const {
  const CloseNote& n = ctl_->close_note[1 - side_];
  if (!peer_left_note()) return peer_closed_error(peer_, "shared memory peer exited");
  std::string text(n.text, strnlen(n.text, sizeof n.text));
  if (text.compare(0, sizeof(kAbortNotePrefix) - 1, kAbortNotePrefix) == 0)
    return peer_failed_error(peer_, text.substr(sizeof(kAbortNotePrefix) - 1));
  return peer_closed_error(peer_, "shared memory peer " + text);
}

void ShmEndpoint::leave_note(const std::string& text) {
  CloseNote& n = ctl_->close_note[side_];
  if (n.set.load(std::memory_order_relaxed) != 0) return;
  const size_t len = std::min(text.size(), sizeof n.text - 1);
  std::memcpy(n.text, text.data(), len);
  n.text[len] = '\0';
  n.set.store(1, std::memory_order_release);
}

void ShmEndpoint::on_peer_gone() {
  if (peer_gone_ || dead_) return;
  peer_gone_ = true;
  gone_status_ = peer_gone_status();
  UCCL_INFO("shm endpoint to %s: %s", peer_.describe().c_str(), gone_status_.message().c_str());
  // Acks the peer wrote before it went away still count (its writes happened before its
  // socket closed); nothing else we send can be delivered or acknowledged any more.
  if (!unacked_.empty()) reap_sends();
  if (pushing_) end_push();
  for (SendRequest* r : sendq_) fail(r, gone_status_);
  for (const Unacked& u : unacked_) fail(u.r, gone_status_);
  sendq_.clear();
  unacked_.clear();
  tx_in_message_ = false;
  drain_after_peer_gone();
}

// The peer's last writes happened before its socket closed, so the ring holds everything it
// ever published: whole messages are still delivered, the first incomplete one ends the stream.
void ShmEndpoint::drain_after_peer_gone() {
  while (!dead_ && !recvq_.empty() && recv_step()) {
  }
  if (!dead_ && !recvq_.empty()) die(gone_status_);
}

void ShmEndpoint::die(const Status& s) {
  if (dead_) return;
  dead_ = true;
  dead_status_ = s;
  if (pushing_) end_push();
  revoke_offers();  // before the receives below fail and their buffers go back to the caller
  for (SendRequest* r : sendq_) fail(r, s);
  for (const Unacked& u : unacked_) fail(u.r, s);
  for (RecvRequest* r : recvq_) fail(r, s);
  sendq_.clear();
  unacked_.clear();
  recvq_.clear();
  tx_in_message_ = false;
  rx_in_message_ = false;
}

void ShmEndpoint::fatal(const Status& s, const std::string& note) {
  if (dead_) return;
  leave_note(note);
  die(s);
  // Tell the peer now: it may be waiting for ring space, a message, or a CMA ack from us.
  if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
  ring_peer();  // and it may be asleep
}

void ShmEndpoint::fail_all(const Status& why) {
  fatal(why, kAbortNotePrefix + why.message());
}

std::string ShmEndpoint::describe() const {
  const uint32_t tx = opt_.cma ? ctl_->cma_verdict[side_].load(std::memory_order_relaxed) : 2;
  const uint32_t rx = ctl_->cma_verdict[1 - side_].load(std::memory_order_relaxed);
  const char* cma = (tx == 1 && rx == 1) ? "cma"
                    : (tx == 1)           ? "cma send only"
                    : (rx == 1)           ? "cma receive only"
                                          : "no cma";
  return "shm (pid " + std::to_string(peer_pid_) + ", " + cma + ")";
}

}  // namespace shm
}  // namespace uccl
