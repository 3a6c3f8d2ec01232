#include "core/schedule_executor.h"

#include <algorithm>
#include <cstring>

#include "base/log.h"
#include "base/reduce.h"
#include "core/connection_manager.h"

namespace uccl {

const TextSetting kPostAhead("algorithms", "UCCL_POST_AHEAD", "on",
                             "a device operation posts the next phase's messages with the current one's where "
                             "their buffers allow (a ring's next step fed chunk by chunk from this one's "
                             "receive): on, off (each phase after the last one ended)",
                             one_of({"on", "off"}));

void ScheduleTask::count_traffic(const Endpoint& ep, const Action& a, uint64_t* by_transport, uint64_t* by_level) {
  by_transport[static_cast<int>(ep.kind())] += a.bytes;
  const int level = conns_->peer_level(a.peer);
  if (level >= 0) by_level[level] += a.bytes;
}

Result<Endpoint*> ScheduleTask::endpoint_for(int peer) {
  return device_ ? conns_->staged_endpoint(peer) : conns_->endpoint(peer);
}

Endpoint* ScheduleTask::comm_endpoint(int peer) { return endpoint_for(peer).value(); }

Status ScheduleTask::match_any_source(Action& a, bool* matched) {
  *matched = false;
  const int n = env_.size;
  Status failed;
  for (int i = 0; i < n; ++i) {
    const int p = (x_->any_source_next + i) % n;
    if (p == env_.rank) continue;  // a rank does not receive from itself here
    // Connects on demand: a peer's message can only be there once a connection is.
    auto ep = endpoint_for(p);
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
    auto ep = endpoint_for(a.peer);
    if (!ep.ok()) return ep.status();
    if (!ep.value()) return Status::Ok();  // still connecting
    (a.kind == Action::Kind::kSend ? nsend : nrecv)++;
    if (a.kind != Action::Kind::kSend) recv_bytes += a.bytes;
  }
  if (device_) {
    if (!locals_queued_) {
      UCCL_RETURN_IF_ERROR(run_locals_on_device(ph, &locals_pending_));
      locals_queued_ = true;
    }
    if (locals_pending_) {  // (a phase with nothing for the device posts at once: no event round trip)
      Result<bool> q = x_->dev->query(x_->locals_done.get());
      if (!q.ok()) return q.status().with_context("device work of the operation");
      if (!q.value()) return Status::Ok();  // the device is still busy with the local actions
    }
    post_messages(ph, nsend, nrecv, recv_bytes);
    post_ahead();
    *ready = true;
    return Status::Ok();
  }
  for (const Action& a : ph.actions) run_local(a);
  post_messages(ph, nsend, nrecv, recv_bytes);
  *ready = true;
  return Status::Ok();
}

void ScheduleTask::run_local(const Action& a) {
  const size_t esize = dtype_size(dtype_);
  switch (a.kind) {
    case Action::Kind::kCopy: std::memmove(a.dst, a.src, a.bytes); break;
    case Action::Kind::kReduce: uccl::reduce(a.dst, a.src, a.src2, a.bytes / esize, dtype_, op_); break;
    case Action::Kind::kScale: uccl::scale(a.dst, a.src, a.bytes / esize, dtype_, a.factor); break;
    case Action::Kind::kDivide: uccl::divide(a.dst, a.src, a.bytes / esize, dtype_, a.divisor); break;
    default: break;
  }
}

namespace {
// The first n requests of `v`, default-initialized. The vector only grows: phases of a small
// operation alternate between one message and none, and each clear-and-resize was a visible
// share of an 8-byte call.
template <class R>
void fresh_requests(std::vector<R>* v, size_t n) {
  if (v->size() < n) v->resize(n);
  for (size_t i = 0; i < n; ++i) (*v)[i] = R{};
}
}  // namespace

// How far the first ordered receive may run ahead of the last of its chain: a few of shm's CMA
// chunks (128 KiB), so the range all peers' data is combined into stays in L2. (4 ranks, 64 MiB
// reduce_scatter on the 2-core VM: leads of 128 KiB to 64 MiB within the noise, 26.9-29.0 ms.)
constexpr size_t kOrderedLeadBytes = 512 << 10;

void ScheduleTask::fill_recv(const Action& a, RecvRequest* r) {
  Envelope e = a.own_envelope ? a.env : env_.envelope;
  if (a.own_envelope) e.op_seq = x_->p2p_recvd[a.peer]++;
  e.step = x_->recv_steps[a.peer]++;
  recv_request(a, e, r);
}

void ScheduleTask::recv_request(const Action& a, const Envelope& expect, RecvRequest* r) const {
  r->dst = a.dst;
  r->bytes = a.bytes;
  r->expect = expect;
  r->reduce = a.kind == Action::Kind::kRecvReduce;
  r->acc = a.src2;
  r->final = a.final_data;
  r->dtype = dtype_;
  r->op = op_;
}

void ScheduleTask::send_request(const Action& a, const Envelope& env, size_t recv_bytes, SendRequest* s) {
  s->data = a.src;
  s->bytes = a.bytes;
  s->env = env;
  // A ring step, not a root's one-way send. Never for p2p: a duplex send may wait for the
  // receive to be posted (shm push), and an any-source receiver posts only once it has seen
  // the message's header.
  s->duplex = !a.own_envelope && 2 * recv_bytes >= a.bytes;
  s->to_final = a.final_data;
}

void ScheduleTask::post_held() {
  while (x_->held_next < x_->chain.size()) {
    const ExecState::Turn& h = x_->chain[x_->held_next];
    if (x_->recvs[h.before].pending()) return;  // (a failed one fails the phase in progress())
    comm_endpoint(h.peer)->post_recv(&x_->recvs[h.index]);
    ++x_->held_next;
  }
}

namespace {
// Chains a phase's ordered receives (RecvRequest::after) in a ring: each after the one before
// it, the first up to kOrderedLeadBytes ahead of the last.
void link_turns(std::vector<RecvRequest>& recvs, const std::vector<ExecState::Turn>& chain) {
  for (size_t k = 1; k < chain.size(); ++k) recvs[chain[k].index].after = &recvs[chain[k].before];
  recvs[chain[0].index].after = &recvs[chain.back().index];
  recvs[chain[0].index].lead = kOrderedLeadBytes;
}
}  // namespace

void ScheduleTask::post_messages(const Phase& ph, size_t nsend, size_t nrecv, size_t recv_bytes,
                                 const std::vector<const RecvRequest*>* fed,
                                 const std::vector<const SendRequest*>* guards) {
  // Sized before posting: transports keep pointers to these requests. A phase posted ahead
  // (fed != nullptr) goes into the second set; the current phase's stay where the endpoints point.
  std::vector<SendRequest>& sends = fed ? x_->ahead_sends : x_->sends;
  std::vector<RecvRequest>& recvs = fed ? x_->ahead_recvs : x_->recvs;
  fresh_requests(&sends, nsend);
  fresh_requests(&recvs, nrecv);
  (fed ? x_->ahead_nsends : x_->nsends) = nsend;
  (fed ? x_->ahead_nrecvs : x_->nrecvs) = nrecv;
  // Receives first: a shm receive posted before the matching send starts lets the sender
  // write straight into it (CMA push), and the peer may be waiting for exactly that offer.
  // A phase with ordered receives posts them once all are chained (below); any other phase
  // posts each as it is filled (the small operations' path: one pass, one lookup each).
  // (A phase posted ahead has none: the current phase's chain stays as it is.)
  bool ordered = false;
  for (const Action& a : ph.actions) ordered = ordered || a.ordered;
  std::vector<ExecState::Turn>& chain = x_->chain;  // the ordered receives
  if (!fed) {
    chain.clear();
    x_->held_next = 0;  // (nothing waits)
  }
  bool turns = true;  // every ordered receive's endpoint takes turns
  size_t ri = 0;
  for (const Action& a : ph.actions) {
    if (!a.is_comm() || a.kind == Action::Kind::kSend) continue;
    Endpoint* ep = comm_endpoint(a.peer);
    fill_recv(a, &recvs[ri]);
    if (guards) recvs[ri].guard = (*guards)[ri];
    if (env_.stats) count_traffic(*ep, a, env_.stats->bytes_received_by_transport, env_.stats->bytes_received_by_level);
    if (!ordered) {
      ep->post_recv(&recvs[ri]);
    } else if (a.ordered) {
      chain.push_back({ri, chain.empty() ? ri : chain.back().index, a.peer});
      turns = turns && ep->takes_turns();
    }
    ++ri;
  }
  if (ordered) {
    const bool hold = chain.size() > 1 && !turns;  // posted one at a time: chain[1..] wait
    if (chain.size() > 1 && turns) link_turns(recvs, chain);
    x_->held_next = hold ? 1 : chain.size();
    ri = 0;
    for (const Action& a : ph.actions) {
      if (!a.is_comm() || a.kind == Action::Kind::kSend) continue;
      if (!(hold && a.ordered && ri != chain[0].index)) comm_endpoint(a.peer)->post_recv(&recvs[ri]);
      ++ri;
    }
  }
  size_t si = 0;
  for (const Action& a : ph.actions) {
    if (a.kind != Action::Kind::kSend) continue;
    Endpoint* ep = comm_endpoint(a.peer);
    SendRequest& s = sends[si++];
    Envelope e = a.own_envelope ? a.env : env_.envelope;
    if (a.own_envelope) e.op_seq = x_->p2p_sent[a.peer]++;
    e.step = x_->send_steps[a.peer]++;
    send_request(a, e, recv_bytes, &s);
    if (fed) s.fed_by = (*fed)[si - 1];
    if (a.tee && ep->takes_tee()) {
      s.tee = a.tee;
    } else if (a.tee && !device_) {
      std::memmove(a.tee, a.src, a.bytes);  // (a device op made this copy on the device)
    }
    if (env_.stats) count_traffic(*ep, a, env_.stats->bytes_sent_by_transport, env_.stats->bytes_sent_by_level);
    ep->post_send(&s);
  }
}

namespace {
bool overlap(const void* a, size_t an, const void* b, size_t bn) {
  const uintptr_t x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return an > 0 && bn > 0 && x < y + bn && y < x + an;
}
}  // namespace

void ScheduleTask::post_ahead() {
  ahead_ = false;
  if (!device_ || phase_ + 1 >= x_->sched.num_phases() || kPostAhead.get() != "on") return;
  if (x_->nsends + x_->nrecvs == 0) return;  // this phase ends at once: nothing to overlap
  if (x_->held_next < x_->chain.size()) return;  // held receives of this phase go first
  const Phase& cur = x_->sched.phase(phase_);
  const Phase& next = x_->sched.phase(phase_ + 1);
  for (const Action& a : cur.actions)
    if (a.ordered) return;
  // The next phase: messages only, each to a connected peer whose endpoint feeds.
  size_t nsend = 0, nrecv = 0, recv_bytes = 0;
  for (const Action& a : next.actions) {
    if (!a.is_comm() || a.ordered || a.tee || a.own_envelope || a.peer == kAnySource) return;
    Result<Endpoint*> ep = endpoint_for(a.peer);
    if (!ep.ok() || !ep.value() || !ep.value()->feeds()) return;
    (a.kind == Action::Kind::kSend ? nsend : nrecv)++;
    if (a.kind != Action::Kind::kSend) recv_bytes += a.bytes;
  }
  if (nsend + nrecv == 0) return;
  // Where its buffers meet this phase's: a send of exactly what one receive delivers is fed
  // by it; a receive into what one send reads is guarded by it; anything else waits.
  std::vector<const RecvRequest*> fed;
  std::vector<const SendRequest*> guards;
  for (const Action& a : next.actions) {
    const bool send = a.kind == Action::Kind::kSend;
    const void* in = send ? a.src : a.src2;  // bytes the message reads (a reducing receive's accumulator)
    const void* out = send ? nullptr : a.dst;
    const RecvRequest* feeder = nullptr;
    const SendRequest* guard = nullptr;
    for (size_t i = 0; i < x_->nrecvs; ++i) {
      const RecvRequest& q = x_->recvs[i];
      if (out && (overlap(out, a.bytes, q.dst, q.bytes) || (q.reduce && overlap(out, a.bytes, q.acc, q.bytes))))
        return;  // written by both phases, or read by this one
      if (in && overlap(in, a.bytes, q.dst, q.bytes)) {
        if (!send || feeder || in != q.dst || a.bytes != q.bytes) return;
        feeder = &q;
      }
    }
    for (size_t i = 0; i < x_->nsends && out; ++i) {
      const SendRequest& q = x_->sends[i];
      if (!overlap(out, a.bytes, q.data, q.bytes)) continue;
      if (guard) return;
      guard = &q;
    }
    if (send) fed.push_back(feeder);
    else guards.push_back(guard);
  }
  post_messages(next, nsend, nrecv, recv_bytes, &fed, &guards);
  ahead_ = true;
  if (env_.stats) ++env_.stats->phases_ahead;
}

Status ScheduleTask::prepare_device() {
  DeviceBackend* b = env_.mem.backend;
  const int ord = env_.mem.ordinal;
  if (x_->dev != b || x_->dev_ordinal != ord || !x_->stream) {
    if (x_->dev && x_->stream) x_->dev->synchronize(x_->stream.get());
    x_->stream.reset();
    x_->locals_done.reset();
    x_->dev = b;
    x_->dev_ordinal = ord;
    auto st = b->create_stream(ord);
    if (!st.ok()) return st.status();
    auto e1 = b->create_event();
    if (!e1.ok()) return e1.status();
    x_->stream = st.take();
    x_->locals_done = e1.take();
  }
  env_.scratch->set_device(b, ord);
  // Ordered after the work already queued on the user's stream: the event the call recorded
  // there (OpEnv::user_ready, in the caller's thread), queried (not waited on) before the first
  // phase starts.
  if (!env_.user_ready) return Internal("a device operation without its stream event (OpEnv::user_ready)");
  user_ready_ = false;
  return Status::Ok();
}

Status ScheduleTask::run_locals_on_device(const Phase& ph, bool* queued) {
  DeviceBackend* b = x_->dev;
  DeviceStream* st = x_->stream.get();
  const DataType dt = dtype_;
  const size_t esize = dtype_size(dt);
  *queued = false;
  for (const Action& a : ph.actions) {
    if (a.is_comm() && !(a.kind == Action::Kind::kSend && a.tee)) continue;
    *queued = true;
    Status s;
    switch (a.kind) {
      case Action::Kind::kCopy: s = device_copy_async(b, a.dst, a.src, a.bytes, CopyDir::kDeviceToDevice, st); break;
      case Action::Kind::kReduce: s = b->reduce_async(a.dst, a.src, a.src2, a.bytes / esize, dt, op_, st); break;
      case Action::Kind::kScale: s = b->scale_async(a.dst, a.src, a.bytes / esize, dt, a.factor, st); break;
      case Action::Kind::kDivide: s = b->divide_async(a.dst, a.src, a.bytes / esize, dt, a.divisor, st); break;
      case Action::Kind::kSend:
        if (a.tee) s = device_copy_async(b, a.tee, a.src, a.bytes, CopyDir::kDeviceToDevice, st);
        break;
      default: break;
    }
    if (!s.ok()) return s.with_context("queueing a local action on the device");
  }
  return *queued ? b->record(x_->locals_done.get(), st) : Status::Ok();
}

Status ScheduleTask::progress(bool* done) {
  *done = false;
  if (!built_) {
    x_ = exec_;
    device_ = env_.mem.is_device();
    if (device_) UCCL_RETURN_IF_ERROR(prepare_device());
    x_->sched.reset(dtype_, op_);
    UCCL_RETURN_IF_ERROR(build_(env_, &x_->sched));
    env_.envelope.algo = static_cast<uint8_t>(x_->sched.algorithm());
    if (device_ && !env_.scratch->error().ok()) return env_.scratch->error().with_context("device scratch");
    built_ = true;
    if (log_enabled(LogLevel::kInfo)) {
      const Envelope& e = env_.envelope;
      UCCL_INFO("%s #%llu: algorithm %s, count %llu %s, %zu phases", collective_name(static_cast<Collective>(e.coll)),
                static_cast<unsigned long long>(e.op_seq), env_.stats ? env_.stats->algorithm.c_str() : "?",
                static_cast<unsigned long long>(e.count), dtype_name(static_cast<DataType>(e.dtype)),
                x_->sched.num_phases());
    }
    x_->built_by = this;
    x_->send_steps.assign(env_.size, 0);
    x_->recv_steps.assign(env_.size, 0);
    tiny_.valid = false;  // made from this schedule on a later run (tiny_ready)
  }
  if (tiny_run_) return progress_tiny(done);
  if (!user_ready_) {
    Result<bool> q = x_->dev->query(env_.user_ready.get());
    if (!q.ok()) return q.status().with_context("the user's stream");
    if (!q.value()) return Status::Ok();  // work queued before the call has not finished yet
    user_ready_ = true;
  }
  while (phase_ < x_->sched.num_phases()) {
    if (!posted_) {
      bool ready = false;
      UCCL_RETURN_IF_ERROR(start_phase(&ready));
      if (!ready) return Status::Ok();
      posted_ = true;
    }
    if (x_->held_next < x_->chain.size()) post_held();  // before anything returns: peers wait for them
    for (size_t i = 0; i < x_->nsends; ++i) {
      const SendRequest& s = x_->sends[i];
      if (s.state == ReqState::kFailed) return s.error;
      if (s.pending()) return Status::Ok();
    }
    for (size_t i = 0; i < x_->nrecvs; ++i) {
      const RecvRequest& r = x_->recvs[i];
      if (r.state == ReqState::kFailed) return r.error;
      if (r.pending()) return Status::Ok();
    }
    ++phase_;
    posted_ = false;
    locals_queued_ = false;
    if (ahead_) {
      // The phase posted ahead becomes the current one. What fed or guarded it is complete:
      // its links go before those requests are reused for the next phase ahead.
      std::swap(x_->sends, x_->ahead_sends);
      std::swap(x_->recvs, x_->ahead_recvs);
      std::swap(x_->nsends, x_->ahead_nsends);
      std::swap(x_->nrecvs, x_->ahead_nrecvs);
      for (size_t i = 0; i < x_->nsends; ++i) x_->sends[i].fed_by = nullptr;
      for (size_t i = 0; i < x_->nrecvs; ++i) x_->recvs[i].guard = nullptr;
      x_->chain.clear();
      x_->held_next = 0;
      posted_ = true;
      post_ahead();
    }
  }
  *done = true;
  return Status::Ok();
}

void ScheduleTask::restart(uint64_t op_seq) {
  env_.envelope.op_seq = op_seq;
  phase_ = 0;
  posted_ = false;
  locals_queued_ = false;
  user_ready_ = true;
  tiny_run_ = false;
  ahead_ = false;
  if (built_ && exec_->built_by == this) {
    std::fill(exec_->send_steps.begin(), exec_->send_steps.end(), 0);
    std::fill(exec_->recv_steps.begin(), exec_->recv_steps.end(), 0);
  } else {
    built_ = false;
  }
}

std::string ScheduleTask::waiting_for() const {
  if (!built_) return "not started";
  if (tiny_run_) return tiny_waiting_for();
  if (!user_ready_) return "waiting for the work queued on the user's device stream";
  if (!posted_ && locals_queued_) return "phase " + std::to_string(phase_) + ": local actions on the device";
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
