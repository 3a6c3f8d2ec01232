// TcpEndpoint receive side: per-socket state machine
//   read header (staging buffer) -> match to a posted receive (or stall) -> payload -> next,
// validation of every header against the request it lands in, fused reduction, and the
// end-of-stream rules that turn a vanished peer into an error instead of a hang.
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "base/reduce.h"
#include "transports/tcp/tcp_endpoint.h"

namespace uccl {
namespace tcp {

namespace {

constexpr int kMaxReadsPerCall = 64;  // bound the time spent on one socket per progress()

// One bounce buffer per thread serves every socket of every endpoint: a reduce chunk is read
// and reduced within one call, only a partial element (< 16 bytes) is kept per socket.
uint8_t* bounce_buffer() {
  struct Holder {
    uint8_t* p = static_cast<uint8_t*>(std::aligned_alloc(64, kBounceBytes));
    ~Holder() { std::free(p); }
  };
  static thread_local Holder h;
  return h.p;
}

// The staged header (whole, at a part boundary) is the peer's abort frame.
bool at_abort_frame(const uint8_t* stage, size_t begin) {
  PartHeader h;
  std::memcpy(&h, stage + begin, sizeof h);
  return h.magic == kPartMagic && h.flags == kPartAbort;
}

}  // namespace

Status TcpEndpoint::parse_header(Socket& s) {
  std::memcpy(&s.hdr, s.stage.get() + s.stage_begin, sizeof(PartHeader));
  const PartHeader& h = s.hdr;
  if (h.magic != kPartMagic) {
    char b[64];
    std::snprintf(b, sizeof b, "bad magic 0x%08x", h.magic);
    return garbage(s, b);
  }
  s.stage_begin += sizeof(PartHeader);
  if (h.flags != 0 || h.part_count == 0 || h.part_bytes > h.total_bytes ||
      h.part_offset > h.total_bytes - h.part_bytes)
    return garbage(s, "inconsistent part header for message #" + std::to_string(h.msg_seq));
  s.have_hdr = true;
  s.op = nullptr;
  s.part_done = 0;
  s.carry_len = 0;
  return Status::Ok();
}

Status TcpEndpoint::match(Socket& s) {
  const PartHeader& h = s.hdr;
  if (h.msg_seq < recv_base_seq_)
    return garbage(s, "part of message #" + std::to_string(h.msg_seq) + ", which is already complete");
  uint64_t idx = h.msg_seq - recv_base_seq_;
  if (idx >= recvs_.size()) {  // the receive is not posted yet
    s.stalled = true;
    return Status::Ok();
  }
  RecvOp* op = &recvs_[idx];
  RecvRequest* r = op->req;
  if (!r->expect.same_call(h.env) || h.total_bytes != r->bytes)
    return mismatch_error(peer_, r->expect, r->bytes, h.env, h.total_bytes);
  if (op->part_count == 0) op->part_count = h.part_count;
  if (op->part_count != h.part_count || op->parts_done >= op->part_count)
    return garbage(s, "part count of message #" + std::to_string(h.msg_seq) + " is inconsistent");
  if (r->reduce) {
    size_t esz = dtype_size(r->dtype);
    if (h.part_offset % esz != 0 || h.part_bytes % esz != 0)
      return garbage(s, "part of message #" + std::to_string(h.msg_seq) + " is not element aligned");
  }
  s.op = op;
  s.stalled = false;
  return Status::Ok();
}

void TcpEndpoint::reduce_chunk(Socket& s, const uint8_t* src, size_t n) {
  RecvRequest* r = s.op->req;
  uint8_t* bounce = bounce_buffer();
  if (src != bounce + s.carry_len) {  // staged bytes: gather carry + data, aligned
    std::memcpy(bounce, s.carry, s.carry_len);
    std::memcpy(bounce + s.carry_len, src, n);
  }
  const size_t esz = dtype_size(r->dtype), total = s.carry_len + n, elems = total / esz;
  const size_t off = s.hdr.part_offset + s.part_done - s.carry_len;  // element aligned
  if (elems > 0) {
    uint8_t* dst = static_cast<uint8_t*>(r->dst) + off;
    const uint8_t* acc = static_cast<const uint8_t*>(r->acc ? r->acc : r->dst) + off;
    reduce(dst, acc, bounce, elems, r->dtype, r->op);
  }
  s.carry_len = total - elems * esz;
  std::memcpy(s.carry, bounce + elems * esz, s.carry_len);
  s.part_done += n;
}

void TcpEndpoint::deliver(Socket& s, const uint8_t* src, size_t n) {
  RecvRequest* r = s.op->req;
  if (r->reduce) {
    reduce_chunk(s, src, n);
    return;
  }
  std::memcpy(static_cast<uint8_t*>(r->dst) + s.hdr.part_offset + s.part_done, src, n);
  s.part_done += n;
}

Status TcpEndpoint::finish_part(Socket& s) {
  RecvOp* op = s.op;
  op->parts_done++;
  op->bytes_done += s.hdr.part_bytes;
  if (op->parts_done == op->part_count && op->bytes_done != s.hdr.total_bytes)
    return garbage(s, "parts of message #" + std::to_string(s.hdr.msg_seq) + " add up to " +
                          std::to_string(op->bytes_done) + " bytes, not " + std::to_string(s.hdr.total_bytes));
  s.have_hdr = false;
  s.op = nullptr;
  return Status::Ok();
}

Status TcpEndpoint::on_eof(Socket& s) {
  if (s.have_hdr || s.staged() > 0)
    return peer_gone("socket " + std::to_string(s.index) + " ended in the middle of message #" +
                     std::to_string(s.hdr.msg_seq));
  // A clean end between messages: fine unless something still needs this peer
  // (check_peer_gone decides once the other sockets have had their say).
  end_stream(s);
  return Status::Ok();
}

// The peer failed: its abort frame ends this socket's stream like a clean close, so that what
// it sent before on the other sockets (a message for a receive not posted yet) is still
// delivered; check_peer_gone fails the endpoint once a pending request cannot complete.
void TcpEndpoint::on_abort_frame(Socket& s) {
  std::string note;
  if (find_abort_note(s, &note) && abort_note_.empty()) abort_note_ = note;
  end_stream(s);
}

void TcpEndpoint::end_stream(Socket& s) {
  s.eof = true;
  any_eof_ = true;
  if (s.in_epoll) epoll_ctl(epfd_, EPOLL_CTL_DEL, s.fd, nullptr);
  s.in_epoll = false;
}

void TcpEndpoint::check_peer_gone() {
  if (!sends_.empty()) {
    fatal(peer_gone(std::to_string(sends_.size()) + " send(s) pending"));
    return;
  }
  bool all_eof = true, can_deliver = false;
  for (auto& s : socks_) {
    all_eof &= s.eof;
    can_deliver |= !s.eof && !s.stalled;
  }
  if (!recvs_.empty() && !can_deliver)
    fatal(peer_gone(std::to_string(recvs_.size()) + " receive(s) pending"));
  else if (all_eof)
    fatal(peer_gone("while the endpoint was idle"));
}

bool TcpEndpoint::recv_on(Socket& s) {
  bool moved = false;
  int reads = 0;
  auto read_error = [&](ssize_t n) {
    if (n == 0) {
      Status st = on_eof(s);
      if (!st.ok()) fatal(st);
    } else {
      const int err = errno;
      std::string why = "recv on socket " + std::to_string(s.index) + lane_of(s) + ": " + std::strerror(err);
      if (err == ETIMEDOUT) why += " (the kernel gave up on its host: a dead link, NIC or host)";
      fatal(peer_gone(why));
    }
    return true;
  };
  while (reads < kMaxReadsPerCall) {
    if (!s.have_hdr) {
      if (s.staged() < sizeof(PartHeader)) {
        if (s.stage_begin > 0) {
          std::memmove(s.stage.get(), s.stage.get() + s.stage_begin, s.staged());
          s.stage_end -= s.stage_begin;
          s.stage_begin = 0;
        }
        ssize_t n = io_recv(s, s.stage.get() + s.stage_end, kStageBytes - s.stage_end);
        ++reads;
        if (n > 0) {
          s.stage_end += static_cast<size_t>(n);
          moved = true;
          continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return moved;
        return read_error(n);
      }
      if (at_abort_frame(s.stage.get(), s.stage_begin)) {
        on_abort_frame(s);
        return true;
      }
      Status st = parse_header(s);
      if (!st.ok()) {
        fatal(st);
        return true;
      }
      moved = true;
    }
    if (!s.op) {
      Status st = match(s);
      if (!st.ok()) {
        fatal(st);
        return true;
      }
      if (s.stalled) {
        update_epoll(s);
        return moved;
      }
    }
    const uint64_t remaining = s.hdr.part_bytes - s.part_done;
    if (remaining == 0) {
      Status st = finish_part(s);
      if (!st.ok()) {
        fatal(st);
        return true;
      }
      moved = true;
      continue;
    }
    if (s.staged() > 0) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(remaining, s.staged()));
      deliver(s, s.stage.get() + s.stage_begin, n);
      s.stage_begin += n;
      moved = true;
      continue;
    }
    // Direct read: the payload to its destination (or the bounce buffer), and the staging
    // buffer as a second iovec to catch the headers and small messages behind it.
    s.stage_begin = s.stage_end = 0;
    RecvRequest* r = s.op->req;
    uint8_t* bounce = nullptr;
    iovec iov[2];
    if (r->reduce) {
      bounce = bounce_buffer();
      std::memcpy(bounce, s.carry, s.carry_len);
      iov[0] = {bounce + s.carry_len, static_cast<size_t>(std::min<uint64_t>(remaining, kBounceBytes - s.carry_len))};
    } else {
      iov[0] = {static_cast<uint8_t*>(r->dst) + s.hdr.part_offset + s.part_done, static_cast<size_t>(remaining)};
    }
    iov[1] = {s.stage.get(), kStageBytes};
    ssize_t n = io_readv(s, iov, 2);
    ++reads;
    if (n > 0) {
      size_t payload = std::min(static_cast<size_t>(n), iov[0].iov_len);
      if (r->reduce) reduce_chunk(s, bounce + s.carry_len, payload);
      else s.part_done += payload;
      s.stage_end = static_cast<size_t>(n) - payload;
      moved = true;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return moved;
    return read_error(n);
  }
  return moved;
}

Result<bool> TcpEndpoint::peek(Envelope* env, size_t* bytes) {
  if (dead_.ok()) progress();
  if (!dead_.ok()) return dead_;
  // A peer that sent and then exited: the message's socket stalled before its end of stream,
  // so the message is still found here (check_peer_gone fails the endpoint only once every
  // socket ended).
  const uint64_t next = recv_base_seq_ + recvs_.size();
  for (const Socket& s : socks_) {
    if (s.have_hdr && s.stalled && s.hdr.msg_seq == next) {
      *env = s.hdr.env;
      *bytes = static_cast<size_t>(s.hdr.total_bytes);
      return true;
    }
  }
  return false;
}

bool TcpEndpoint::complete_recvs() {
  bool moved = false;
  while (!recvs_.empty() && recvs_.front().part_count != 0 && recvs_.front().parts_done == recvs_.front().part_count) {
    RecvRequest* r = recvs_.front().req;
    counters_.bytes_received += r->bytes;
    recvs_.pop_front();
    ++recv_base_seq_;
    complete(r);
    moved = true;
  }
  return moved;
}

}  // namespace tcp
}  // namespace uccl
