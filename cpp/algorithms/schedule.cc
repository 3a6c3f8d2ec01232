#include "algorithms/schedule.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "base/huge_pages.h"

namespace uccl {

void Schedule::reset(DataType dtype, RedOp op) {
  dtype_ = dtype;
  op_ = op;
  used_ = 0;
  algorithm_ = Algorithm::kAuto;
}

void Schedule::new_phase() {
  if (used_ == phases_.size()) phases_.emplace_back();
  phases_[used_++].actions.clear();
}

Action& Schedule::add(Action::Kind kind, int peer, void* dst, const void* src, const void* src2, size_t bytes) {
  if (used_ == 0) new_phase();
  Action& a = phases_[used_ - 1].actions.emplace_back();
  a.kind = kind;
  a.peer = peer;
  a.dst = dst;
  a.src = src;
  a.src2 = src2;
  a.bytes = bytes;
  return a;
}

Action& Schedule::send(int peer, const void* src, size_t bytes) {
  return add(Action::Kind::kSend, peer, nullptr, src, nullptr, bytes);
}

Action& Schedule::send_tee(int peer, const void* src, size_t bytes, void* tee) {
  Action& a = add(Action::Kind::kSend, peer, nullptr, src, nullptr, bytes);
  if (tee != src && bytes > 0) a.tee = tee;
  return a;
}

Action& Schedule::recv(int peer, void* dst, size_t bytes) {
  return add(Action::Kind::kRecv, peer, dst, nullptr, nullptr, bytes);
}

Action& Schedule::recv_reduce(int peer, void* dst, const void* acc, size_t bytes) {
  return add(Action::Kind::kRecvReduce, peer, dst, nullptr, acc, bytes);
}

void Schedule::copy(void* dst, const void* src, size_t bytes) {
  if (dst == src || bytes == 0) return;
  add(Action::Kind::kCopy, -1, dst, src, nullptr, bytes);
}

void Schedule::reduce(void* dst, const void* lhs, const void* rhs, size_t bytes) {
  add(Action::Kind::kReduce, -1, dst, lhs, rhs, bytes);
}

void Schedule::scale(void* dst, const void* src, size_t bytes, double factor) {
  add(Action::Kind::kScale, -1, dst, src, nullptr, bytes).factor = factor;
}

void Schedule::divide(void* dst, const void* src, size_t bytes, int divisor) {
  add(Action::Kind::kDivide, -1, dst, src, nullptr, bytes).divisor = divisor;
}

void Schedule::p2p(const P2POp& op, const Envelope& env) {
  Action& a = add(op.is_send ? Action::Kind::kSend : Action::Kind::kRecv, op.peer, op.buf, op.buf, nullptr,
                  op.count * dtype_size(op.dtype));
  a.own_envelope = true;
  a.env = env;
}

void Schedule::append_wavefront(const std::vector<Schedule>& parts) {
  size_t longest = 0;
  for (const Schedule& part : parts) longest = std::max(longest, part.num_phases());
  if (longest == 0) return;
  for (size_t p = 0; p + 1 < longest + parts.size(); ++p) {
    new_phase();
    std::vector<Action>& out = phases_[used_ - 1].actions;
    for (size_t i = 0; i < parts.size() && i <= p; ++i)
      if (p - i < parts[i].num_phases()) {
        const std::vector<Action>& in = parts[i].phase(p - i).actions;
        out.insert(out.end(), in.begin(), in.end());
      }
  }
}

ScratchArena::~ScratchArena() { release(); }

void ScratchArena::release() {
  if (dev_) dev_->free(buf_);
  else if (cap_ >= kHugePage) unmap_pages(buf_, cap_);
  else std::free(buf_);
  buf_ = nullptr;
  cap_ = 0;
}

void ScratchArena::set_device(DeviceBackend* backend, int ordinal) {
  if (backend == dev_ && ordinal == ordinal_) return;
  release();
  dev_ = backend;
  ordinal_ = ordinal;
}

void* ScratchArena::get(size_t bytes) {
  if (bytes > cap_) {
    release();
    cap_ = (bytes + 4095) & ~size_t(4095);
    if (dev_) {
      Result<void*> p = dev_->alloc(ordinal_, cap_);
      buf_ = p.ok() ? p.value() : nullptr;
      error_ = p.status();
      if (!buf_) cap_ = 0;
    } else if (cap_ >= kHugePage) {
      // Large scratch on huge pages where the system offers them (base/huge_pages.h): the
      // algorithms stream through it once per operation.
      cap_ = (cap_ + kHugePage - 1) & ~(kHugePage - 1);
      buf_ = map_pages(cap_);
    } else {
      buf_ = std::aligned_alloc(64, cap_);
    }
  }
  return buf_;
}

}  // namespace uccl
