// The endpoint a rank uses to talk to itself (p2p to self, degenerate schedules): messages are
// matched FIFO in memory and copied (or reduced) when both sides are posted.
#pragma once

#include <deque>

#include "base/reduce.h"
#include "transports/transport.h"

namespace uccl {

class LoopbackEndpoint : public Endpoint {
 public:
  void post_send(SendRequest* r) override {
    r->state = ReqState::kPending;
    sends_.push_back(r);
  }
  void post_recv(RecvRequest* r) override {
    r->state = ReqState::kPending;
    recvs_.push_back(r);
  }
  bool progress() override {
    bool moved = false;
    while (!sends_.empty() && !recvs_.empty()) {
      SendRequest* s = sends_.front();
      RecvRequest* r = recvs_.front();
      sends_.pop_front();
      recvs_.pop_front();
      if (!r->expect.same_call(s->env) || r->bytes != s->bytes) {
        PeerContext self;
        Status st = mismatch_error(self, r->expect, r->bytes, s->env, s->bytes);
        fail(s, st);
        fail(r, st);
      } else {
        if (r->reduce) {
          size_t n = r->bytes / dtype_size(r->dtype);
          uccl::reduce(r->dst, r->acc ? r->acc : r->dst, s->data, n, r->dtype, r->op);
        } else if (r->bytes) {
          std::memmove(r->dst, s->data, r->bytes);
        }
        counters_.bytes_sent += s->bytes;
        counters_.bytes_received += s->bytes;
        complete(s);
        complete(r);
      }
      moved = true;
    }
    return moved;
  }
  bool has_pending() const override { return !sends_.empty() || !recvs_.empty(); }
  void fail_all(const Status& why) override {
    for (auto* s : sends_) fail(s, why);
    for (auto* r : recvs_) fail(r, why);
    sends_.clear();
    recvs_.clear();
  }
  TransportKind kind() const override { return TransportKind::kShm; }
  std::string describe() const override { return "loopback (self)"; }

 private:
  std::deque<SendRequest*> sends_;
  std::deque<RecvRequest*> recvs_;
};

}  // namespace uccl
