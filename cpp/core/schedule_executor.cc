#include "core/schedule_executor.h"

#include <cstring>

#include "base/log.h"
#include "base/reduce.h"
#include "core/connection_manager.h"

namespace uccl {

void ScheduleTask::count_traffic(const Endpoint& ep, const Action& a, uint64_t* by_transport, uint64_t* by_level) {
  by_transport[static_cast<int>(ep.kind())] += a.bytes;
  const int level = conns_->peer_level(a.peer);
  if (level >= 0) by_level[level] += a.bytes;
}

Status ScheduleTask::match_any_source(Action& a, bool* matched) {
  *matched = false;
  const int n = env_.size;
  Status failed;
  for (int i = 0; i < n; ++i) {
    const int p = (x_->any_source_next + i) % n;
    if (p == env_.rank) continue;  // a rank does not receive from itself here
    // Connects on demand: a peer's message can only be there once a connection is.
    auto ep = conns_->endpoint(p);
    if (!ep.ok()) {
      if (failed.ok()) failed = ep.status();
      continue;
    }
    if (!ep.value()) continue;
    Endpoint* e = ep.value();
    e->watched = true;
    Envelope got;
    size_t bytes = 0;
    auto r = e->peek(&got, &bytes);
    if (!r.ok()) {
      if (failed.ok()) failed = r.status();
      continue;
    }
    // Another peer's next message may be a collective's or carry another tag: it waits for
    // a later receive. A message with the tag but another size or dtype is posted anyway:
    // the transport then reports the mismatch naming both sides, as for any receive.
    if (!r.value() || got.coll != static_cast<uint8_t>(Collective::kSendRecv) || got.root != a.env.root) continue;
    a.peer = p;
    x_->any_source_next = (p + 1) % n;
    if (env_.stats) env_.stats->source = p;
    for (auto& other : conns_->endpoints())
      if (other) other->watched = false;
    *matched = true;
    return Status::Ok();
  }
  // A member that died or closed cannot be told apart from the one that would have sent: the
  // receive fails with its error instead of waiting for the deadline.
  if (!failed.ok()) return failed.with_context("receive from any source");
  return Status::Ok();
}

Status ScheduleTask::start_phase(bool* ready) {
  Phase& ph = x_->sched.phase(phase_);
  *ready = false;
  for (Action& a : ph.actions) {
    if (a.is_comm() && a.peer == kAnySource) {
      bool matched = false;
      UCCL_RETURN_IF_ERROR(match_any_source(a, &matched));
      if (!matched) return Status::Ok();
    }
  }
  // Every peer of the phase must be connected before anything is posted, so that a phase's
  // messages are posted together and in schedule order.
  size_t nsend = 0, nrecv = 0, recv_bytes = 0;
  for (const Action& a : ph.actions) {
    if (!a.is_comm()) continue;
    auto ep = conns_->endpoint(a.peer);
    if (!ep.ok()) return ep.status();
    if (!ep.value()) return Status::Ok();  // still connecting
    (a.kind == Action::Kind::kSend ? nsend : nrecv)++;
    if (a.kind != Action::Kind::kSend) recv_bytes += a.bytes;
  }
  const DataType dt = dtype_;
  const size_t esize = dtype_size(dt);
  for (const Action& a : ph.actions) {
    switch (a.kind) {
      case Action::Kind::kCopy: std::memmove(a.dst, a.src, a.bytes); break;
      case Action::Kind::kReduce: uccl::reduce(a.dst, a.src, a.src2, a.bytes / esize, dt, op_); break;
      case Action::Kind::kScale: uccl::scale(a.dst, a.src, a.bytes / esize, dt, a.factor); break;
      case Action::Kind::kDivide: uccl::divide(a.dst, a.src, a.bytes / esize, dt, a.divisor); break;
      default: break;
    }
  }
  // Sized before posting: transports keep pointers to these requests.
  std::vector<SendRequest>& sends = x_->sends;
  std::vector<RecvRequest>& recvs = x_->recvs;
  sends.clear();
  recvs.clear();
  sends.resize(nsend);
  recvs.resize(nrecv);
  // Receives first: a shm receive posted before the matching send starts lets the sender
  // write straight into it (CMA push), and the peer may be waiting for exactly that offer.
  size_t ri = 0;
  for (const Action& a : ph.actions) {
    if (!a.is_comm() || a.kind == Action::Kind::kSend) continue;
    Endpoint* ep = conns_->endpoint(a.peer).value();
    RecvRequest& r = recvs[ri++];
    r.dst = a.dst;
    r.bytes = a.bytes;
    r.expect = a.own_envelope ? a.env : env_.envelope;
    if (a.own_envelope) r.expect.op_seq = x_->p2p_recvd[a.peer]++;
    r.expect.step = x_->recv_steps[a.peer]++;
    r.reduce = a.kind == Action::Kind::kRecvReduce;
    r.acc = a.src2;
    r.dtype = dt;
    r.op = op_;
    if (env_.stats) count_traffic(*ep, a, env_.stats->bytes_received_by_transport, env_.stats->bytes_received_by_level);
    ep->post_recv(&r);
  }
  size_t si = 0;
  for (const Action& a : ph.actions) {
    if (a.kind != Action::Kind::kSend) continue;
    Endpoint* ep = conns_->endpoint(a.peer).value();
    SendRequest& s = sends[si++];
    s.data = a.src;
    s.bytes = a.bytes;
    s.env = a.own_envelope ? a.env : env_.envelope;
    if (a.own_envelope) s.env.op_seq = x_->p2p_sent[a.peer]++;
    s.env.step = x_->send_steps[a.peer]++;
    // A ring step, not a root's one-way send. Never for p2p: a duplex send may wait for the
    // receive to be posted (shm push), and an any-source receiver posts only once it has seen
    // the message's header.
    s.duplex = !a.own_envelope && 2 * recv_bytes >= a.bytes;
    if (a.tee && ep->takes_tee()) {
      s.tee = a.tee;
    } else if (a.tee) {
      std::memmove(a.tee, a.src, a.bytes);
    }
    if (env_.stats) count_traffic(*ep, a, env_.stats->bytes_sent_by_transport, env_.stats->bytes_sent_by_level);
    ep->post_send(&s);
  }
  *ready = true;
  return Status::Ok();
}

Status ScheduleTask::progress(bool* done) {
  *done = false;
  if (!built_) {
    x_ = exec_;
    x_->sched.reset(dtype_, op_);
    UCCL_RETURN_IF_ERROR(build_(env_, &x_->sched));
    built_ = true;
    if (log_enabled(LogLevel::kInfo)) {
      const Envelope& e = env_.envelope;
      UCCL_INFO("%s #%llu: algorithm %s, count %llu %s, %zu phases", collective_name(static_cast<Collective>(e.coll)),
                static_cast<unsigned long long>(e.op_seq), env_.stats ? env_.stats->algorithm.c_str() : "?",
                static_cast<unsigned long long>(e.count), dtype_name(static_cast<DataType>(e.dtype)),
                x_->sched.num_phases());
    }
    x_->send_steps.assign(env_.size, 0);
    x_->recv_steps.assign(env_.size, 0);
  }
  while (phase_ < x_->sched.num_phases()) {
    if (!posted_) {
      bool ready = false;
      UCCL_RETURN_IF_ERROR(start_phase(&ready));
      if (!ready) return Status::Ok();
      posted_ = true;
    }
    for (auto& s : x_->sends) {
      if (s.state == ReqState::kFailed) return s.error;
      if (s.pending()) return Status::Ok();
    }
    for (auto& r : x_->recvs) {
      if (r.state == ReqState::kFailed) return r.error;
      if (r.pending()) return Status::Ok();
    }
    ++phase_;
    posted_ = false;
  }
  *done = true;
  return Status::Ok();
}

std::string ScheduleTask::waiting_for() const {
  if (!built_) return "not started";
  const Phase& ph = x_->sched.phase(phase_);
  if (!posted_) {
    for (const Action& a : ph.actions)
      if (a.is_comm() && a.peer == kAnySource)
        return "a message from any rank (tag " + std::to_string(static_cast<uint32_t>(a.env.root)) + ", " +
               std::to_string(a.bytes) + " bytes)";
    return "phase " + std::to_string(phase_) + ": connecting to its peers";
  }
  std::string s;
  size_t si = 0, ri = 0;
  for (const Action& a : ph.actions) {
    if (!a.is_comm()) continue;
    bool pending = a.kind == Action::Kind::kSend ? x_->sends[si++].pending() : x_->recvs[ri++].pending();
    if (!pending) continue;
    s += std::string(s.empty() ? "" : ", ") + (a.kind == Action::Kind::kSend ? "send to rank " : "receive from rank ") +
         std::to_string(a.peer) + " (" + std::to_string(a.bytes) + " bytes)";
  }
  return "phase " + std::to_string(phase_) + " of " + std::to_string(x_->sched.num_phases()) + ": " + s;
}

}  // namespace uccl
