// The tiny plan: how an express operation whose messages are all small runs (issue 18: the
// 8-byte all_reduce at Open MPI's latency).
//
// Why: the shm endpoints exchange an 8-byte message in ~0.35 us per step on the 2-core VM (a
// loop of post_send / post_recv / progress), Open MPI's MPI_Allreduce takes ~0.6 us, and
// uccl's blocking all_reduce took ~0.9: the difference was the executor and the engine around
// the endpoints, each phase re-deriving its endpoints, requests and envelopes from the
// schedule, and each poll a pass over every endpoint and the connections under a lock round.
//
// What: once an express task's schedule was built (host memory, every comm action a plain
// collective message of at most kTinyBytes (8 KiB), every peer connected), its phases become a flat
// plan: the local actions, and send and receive requests filled in as post_messages() would
// (the same envelopes with the per-peer step numbers of the schedule's order), kept from run to
// run. A run sets the operation number, runs a phase's local actions, posts its requests and
// polls only the endpoints of the plan (Engine::run_inline spins on it under the lock for a
// few microseconds, then waits as for any operation). The wire cannot tell the difference: a
// peer running the same operation through the schedule, or asynchronously, matches it.
// The plan is checked on every run against the endpoints the connection manager holds (a
// connection wrapped for device memory since then makes a new plan) and dropped whenever the
// schedule is rebuilt.
#include "base/log.h"
#include "core/connection_manager.h"
#include "core/schedule_executor.h"

namespace uccl {

namespace {
// Messages of at most this size qualify: below shm's push and CMA sizes (16 KiB), where the
// transports' pipelining and receive offers matter. 2-rank all_reduce of 4 KiB: 2.9 -> 2.3 us
// with 8 KiB here instead of 256 bytes.
constexpr size_t kTinyBytes = 8192;
}  // namespace

bool ScheduleTask::make_tiny_plan() {
  TinyPlan& t = tiny_;
  t.valid = false;
  t.phases.clear();
  t.locals.clear();
  t.sends.clear();
  t.recvs.clear();
  t.send_eps.clear();
  t.recv_eps.clear();
  t.peers.clear();
  std::vector<uint32_t> send_steps(env_.size, 0), recv_steps(env_.size, 0);
  const auto& eps = conns_->endpoints();
  auto endpoint = [&](int peer) -> Endpoint* {
    Endpoint* ep = peer >= 0 && peer < env_.size ? eps[peer].get() : nullptr;
    if (!ep) return nullptr;
    bool known = false;
    for (auto& p : t.peers) known = known || p.first == peer;
    if (!known) t.peers.emplace_back(peer, ep);
    return ep;
  };
  for (size_t i = 0; i < exec_->sched.num_phases(); ++i) {
    const Phase& ph = exec_->sched.phase(i);
    size_t recv_bytes = 0;
    for (const Action& a : ph.actions) {
      if (!a.is_comm()) {
        t.locals.push_back(a);
        continue;
      }
      if (a.own_envelope || a.ordered || a.tee || a.bytes > kTinyBytes) return false;
      if (a.kind != Action::Kind::kSend) recv_bytes += a.bytes;
    }
    // Receives, then sends, each in schedule order, as post_messages() numbers them.
    for (const Action& a : ph.actions) {
      if (!a.is_comm() || a.kind == Action::Kind::kSend) continue;
      Endpoint* ep = endpoint(a.peer);
      if (!ep) return false;
      Envelope e = env_.envelope;
      e.step = recv_steps[a.peer]++;
      t.recvs.emplace_back();
      recv_request(a, e, &t.recvs.back());
      t.recv_eps.push_back(ep);
    }
    for (const Action& a : ph.actions) {
      if (a.kind != Action::Kind::kSend) continue;
      Endpoint* ep = endpoint(a.peer);
      if (!ep) return false;
      Envelope e = env_.envelope;
      e.step = send_steps[a.peer]++;
      t.sends.emplace_back();
      send_request(a, e, recv_bytes, &t.sends.back());
      t.send_eps.push_back(ep);
    }
    t.phases.push_back({t.locals.size(), t.sends.size(), t.recvs.size()});
  }
  t.valid = true;
  return true;
}

bool ScheduleTask::tiny_ready() {
  tiny_run_ = false;
  if (!built_ || exec_->built_by != this || device_ || env_.stats) return false;
  bool same = tiny_.valid;
  const auto& eps = conns_->endpoints();
  for (auto& p : tiny_.peers) same = same && eps[p.first].get() == p.second;
  if (!same && !make_tiny_plan()) return false;
  tiny_run_ = true;
  return true;
}

Status ScheduleTask::progress_tiny(bool* done) {
  *done = false;
  const TinyPlan& t = tiny_;
  while (phase_ < t.phases.size()) {
    const size_t l0 = phase_ ? t.phases[phase_ - 1].locals_end : 0;
    const size_t s0 = phase_ ? t.phases[phase_ - 1].sends_end : 0;
    const size_t r0 = phase_ ? t.phases[phase_ - 1].recvs_end : 0;
    const TinyPlan::Phase& ph = t.phases[phase_];
    if (!posted_) {
      for (size_t i = l0; i < ph.locals_end; ++i) run_local(t.locals[i]);
      const uint64_t seq = env_.envelope.op_seq;
      for (size_t i = r0; i < ph.recvs_end; ++i) {
        RecvRequest& r = tiny_.recvs[i];
        r.expect.op_seq = seq;
        r.delivered = 0;
        t.recv_eps[i]->post_recv(&r);
      }
      for (size_t i = s0; i < ph.sends_end; ++i) {
        SendRequest& s = tiny_.sends[i];
        s.env.op_seq = seq;
        t.send_eps[i]->post_send(&s);
      }
      posted_ = true;
    }
    for (int pass = 0;; ++pass) {
      bool pending = false;
      for (size_t i = s0; i < ph.sends_end; ++i) {
        if (t.sends[i].state == ReqState::kFailed) return t.sends[i].error;
        pending = pending || t.sends[i].pending();
      }
      for (size_t i = r0; i < ph.recvs_end; ++i) {
        if (t.recvs[i].state == ReqState::kFailed) return t.recvs[i].error;
        pending = pending || t.recvs[i].pending();
      }
      if (!pending) break;
      if (pass == 1) return Status::Ok();  // polled once: the caller comes back
      for (auto& p : t.peers)
        if (p.second->has_pending()) p.second->progress();
    }
    ++phase_;
    posted_ = false;
  }
  *done = true;
  return Status::Ok();
}

std::string ScheduleTask::tiny_waiting_for() const {
  const TinyPlan& t = tiny_;
  if (phase_ >= t.phases.size()) return "nothing (finished)";
  const size_t s0 = phase_ ? t.phases[phase_ - 1].sends_end : 0;
  const size_t r0 = phase_ ? t.phases[phase_ - 1].recvs_end : 0;
  std::string s;
  auto add = [&](const char* what, int peer, size_t bytes) {
    s += std::string(s.empty() ? "" : ", ") + what + std::to_string(peer) + " (" + std::to_string(bytes) + " bytes)";
  };
  auto peer_of = [&](const Endpoint* ep) {
    for (auto& p : t.peers)
      if (p.second == ep) return p.first;
    return -1;
  };
  for (size_t i = s0; i < t.phases[phase_].sends_end; ++i)
    if (t.sends[i].pending()) add("send to rank ", peer_of(t.send_eps[i]), t.sends[i].bytes);
  for (size_t i = r0; i < t.phases[phase_].recvs_end; ++i)
    if (t.recvs[i].pending()) add("receive from rank ", peer_of(t.recv_eps[i]), t.recvs[i].bytes);
  return "phase " + std::to_string(phase_) + " of " + std::to_string(t.phases.size()) + ": " +
         (posted_ ? s : std::string("not posted"));
}

}  // namespace uccl
