#include "core/engine.h"

#include <sched.h>
#include <time.h>

#include <type_traits>

#include "base/config.h"
#include "base/device.h"
#include "base/log.h"
#include "base/net.h"
#include "base/thread_name.h"
#include "transports/registry.h"

namespace uccl {

namespace {
const BoolSetting kProgressThread("general", "UCCL_PROGRESS_THREAD", "1",
                                  "run a background progress thread for asynchronous ops", boolean());

// The engine that owns the process's signal waits (Engine::owns_signal_waits), or none.
std::atomic<const Engine*> g_signal_waits_owner{nullptr};
}  // namespace

// ---- Engine ------------------------------------------------------------------------------------

Engine::Engine(int rank, int size, std::unique_ptr<ConnectionManager> conns, double timeout_s)
    : rank_(rank), size_(size), conns_(std::move(conns)), timeout_s_(timeout_s) {
  const Engine* none = nullptr;
  owns_signal_waits_ = g_signal_waits_owner.compare_exchange_strong(none, this);
}

Engine::~Engine() {
  shutdown();
  const Engine* me = this;
  if (owns_signal_waits_) g_signal_waits_owner.compare_exchange_strong(me, nullptr);
}

void Engine::start_progress_thread() {
  if (kProgressThread.get()) thread_ = std::thread([this] { thread_main(); });
}

void Engine::run(Callbacks& cbs) {
  for (auto& cb : cbs) cb();
  cbs.clear();
}

Status Engine::submit(const std::shared_ptr<OpWork>& w) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_flag_.load()) return failed_;
    queue_.push_back(w);  // its deadline is set when progress_once() first reads the clock for it
    queued_.store(queue_.size());
  }
  if (waiters_.load() == 0) cv_.notify_one();
  return Status::Ok();
}

Status Engine::step(ScheduleTask* t, bool* finished, bool* moved) {
  Status s = t->progress(finished);
  if (s.ok() && !*finished) {
    for (auto& ep : conns_->endpoints())
      if (ep && ep->has_pending()) *moved |= ep->progress();
    s = t->progress(finished);
  }
  return s;
}

bool Engine::progress_once(Callbacks* done) {
  if (armed_) disarm_all();
  bool moved = conns_->progress();
  if (inline_) {  // issued before anything queued now (Engine::idle)
    bool finished = false;
    Status s = step(inline_->task, &finished, &moved);
    if (!settle_inline(s, finished, done)) return moved;  // its deadline is its waiter's
    if (!s.ok()) return true;
    moved = true;
  }
  while (!queue_.empty()) {
    OpWork* head = queue_.front().get();
    bool finished = false;
    Status s = step(head->task.get(), &finished, &moved);
    if (!s.ok()) {
      fail_everything(s.with_context(head->label()), done);
      return true;
    }
    if (!finished) {
      // Deadlines are seconds away: look at the clock on every 64th pass only (a read costs
      // ~25-40 ns, a pass of a small operation's spin loop ~150 ns). An operation's clock starts
      // at the first look (within 64 passes of it reaching the head of the queue), so one that
      // completes sooner never reads the clock at all.
      if ((++passes_ & 63) == 0 && head->deadline == 0) {
        head->deadline = now_s() + timeout_s_;
      } else if ((passes_ & 63) == 0 && now_s() > head->deadline) {
        Status t(Code::kTimeout, head->label() + " did not complete within " + seconds_text(timeout_s_) +
                                     "; waiting for " + head->task->waiting_for());
        fail_everything(t, done);
        return true;
      }
      return moved;
    }
    UCCL_TRACE("%s done (%s)", head->label().c_str(), head->stats_.algorithm.c_str());
    head->finish(Status::Ok(), done);
    queue_.pop_front();
    queued_.store(queue_.size());
    moved = true;
  }
  return moved;
}

void Engine::fail_everything(const Status& cause, Callbacks* done) {
  Status why = cause;
  if (!failed_flag_.load()) {
    // A peer that closed its connection may itself have failed because of a third rank (a
    // ring neighbour died). The note it sent before closing names that root cause; without one
    // (it died, or its transport could not send it) its record in the store may. Notes and
    // records hold only the root cause, so messages stay one level deep however long the cascade.
    const bool carried = !why.root_cause().empty();  // the transport brought the peer's cause
    std::string root = carried ? why.root_cause() : why.message();
    if (why.code() == Code::kRemoteError && why.peer() >= 0 && !carried) {
      // A failing peer publishes its record before it closes anything, so the record is
      // there already if it exists: wait only for a store round trip, not for a dead peer.
      std::string theirs = conns_->peer_failure(why.peer(), 0.2);
      if (!theirs.empty()) {
        root = theirs;
        why = why.with_root_cause(theirs);
      }
    }
    failed_ = why;
    failed_flag_.store(true);
    UCCL_WARN("communicator failed: %s", why.message().c_str());
    conns_->publish_failure(root);  // before closing, so peers can read it
    conns_->notify_failure(root);   // peers with no connection to carry it (<= 0.5 s)
    cause_for_peers_ = Status(Code::kAborted, root);
  }
  bool first = true;
  if (inline_) {
    inline_->finish(why);
    inline_ = nullptr;
    first = false;
  }
  for (auto& w : queue_) {
    w->finish(first ? why : Status(why.code(), "communicator failed earlier: " + why.message(), why.peer()), done);
    first = false;
  }
  queue_.clear();
  queued_.store(0);
  for (auto& ep : conns_->endpoints())
    if (ep) ep->fail_all(cause_for_peers_);
  // Closing the sockets tells every peer at once, instead of leaving them to their timeouts.
  // First the abort notes just written must reach them: a socket closed with input unread is
  // reset, and the reset drops what it still held for the peer, which would then see a bare
  // "connection reset" and name this rank instead of the root cause. A live peer reads them
  // within microseconds; a dead or stuck one costs at most kFarewellSeconds.
  const double farewell_until = now_s() + kFarewellSeconds;
  auto delivered = [&] {
    for (auto& ep : conns_->endpoints())
      if (ep && !ep->farewell_delivered()) return false;
    return true;
  };
  while (!delivered() && now_s() < farewell_until) std::this_thread::sleep_for(std::chrono::microseconds(200));
  conns_->close_all();
  remove_dead_peers_leftovers();
}

bool Engine::peer_on_my_cpu() {
  const int cpu = sched_getcpu();
  if (cpu < 0) return false;
  std::lock_guard<std::mutex> lock(mu_);
  bool shared = false;
  for (auto& ep : conns_->endpoints()) {
    if (!ep || !ep->has_pending()) continue;
    ep->note_waiting_on_cpu(cpu);
    shared |= ep->peer_waits_on_cpu(cpu);
  }
  return shared;
}

void Engine::disarm_all() {
  armed_ = false;
  for (auto& ep : conns_->endpoints())
    if (ep) ep->disarm_wait();
}

bool Engine::sleep_until_signalled(double idle, Callbacks* done) {
  thread_local WaitSet ws;  // keeps its capacity; one per thread (two may wait on one engine)
  bool moved;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ws.clear();
    conns_->collect_wait_fds(&ws.fds);
    for (auto& ep : conns_->endpoints())
      if (ep && (ep->has_pending() || ep->watched)) ep->arm_wait(&ws);
    armed_ = true;
    // Whatever a peer did before it could see the arming is seen by this pass; whatever it does
    // after, it signals.
    moved = progress_once(done);
  }
  run(*done);
  if (moved) return true;
  // Bounded, so deadlines, liveness checks (a dead shm peer rings nothing) and new connections
  // get their look: 1 ms while a wait is young, 10 ms once nothing has moved for 0.1 s.
  idle_sleep(ws, idle < 0.1 ? 1e-3 : 10e-3);
  return false;
}

Status Engine::wait(OpWork* w, double timeout_s) { return wait_for(w, timeout_s); }

bool Engine::idle() {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.empty() && !inline_ && !failed_flag_.load();
}

bool Engine::settle_inline(const Status& s, bool finished, Callbacks* done) {
  if (!s.ok()) {
    fail_everything(s.with_context(inline_->label()), done);  // (finishes it, with the error)
    return true;
  }
  if (!finished) return false;
  inline_->finish(Status::Ok());
  inline_ = nullptr;
  return true;
}

Status Engine::run_inline(InlineOp* op, std::unique_lock<std::mutex>* issue_lock, uint64_t* issued_seq,
                          double timeout_s, bool* started) {
  Callbacks done;
  {
    std::unique_lock<std::mutex> lock(mu_);
    *started = false;
    if (!queue_.empty() || inline_ || failed_flag_.load()) return Status::Ok();
    // Only now, under the lock: until the queue was seen empty, a queued operation may still
    // have been executing on the ExecState the restart reads.
    op->task->restart(op->seq);
    inline_ = op;
    *issued_seq = op->seq;
    issue_lock->unlock();  // what is issued from now on queues behind it
    *started = true;
    if (armed_) disarm_all();
    if (op->task->tiny_ready()) {
      // Its own endpoints only, no pass over the others and the connections, no lock round per
      // poll: the 8-byte all_reduce's path (core/schedule_tiny.cc). The clock is first read
      // after 256 polls, so an operation that completes sooner never reads it. Where the idle
      // policy yields (more ranks than cores), the peer may need this very core: each poll
      // that did not finish gives the core away with the lock released (other threads can
      // submit meanwhile; one that drives the engine may finish the operation), for as long as
      // the policy spins. 4 ranks on 2 cores, 8-byte all_reduce: 7.1 -> 5.2 us, beside a busy
      // loop 21 -> 12-14 us; falling back to wait()'s passes after one poll cost the pass over
      // the connections per yield, and spinning under the lock without yielding 84 us per call.
      // Elsewhere it spins under the lock for up to kTinySpinS. A late peer is then waited for
      // as wait() does.
      const IdlePolicy policy = idle_policy();
      const double spin_s = policy.yield ? policy.spin_s : std::min(kTinySpinS, policy.spin_s);
      double since = 0;
      for (uint32_t i = 1;; ++i) {
        bool finished = false;
        Status s = op->task->progress(&finished);
        if (settle_inline(s, finished, &done) || spin_s <= 0) break;
        if ((i & 255) == 0) {
          const double now = now_s();
          if (since == 0) since = now;
          else if (now - since > spin_s) break;  // a late peer: wait as wait() does
        }
        if (policy.yield) {
          lock.unlock();
          sched_yield();
          lock.lock();
          if (inline_ != op) break;  // another thread's pass ended it meanwhile
        }
      }
    } else {
      // The first pass (it posts the first phase) under the same lock: one lock round less per
      // blocking call. With the queue empty it completes no Work, so `done` stays empty.
      progress_once(&done);
    }
  }
  run(done);
  if (op->done()) return op->status();
  return wait_for(op, timeout_s);
}

template <class Op>
Status Engine::wait_for(Op* w, double timeout_s) {
  if (w->done()) return w->status();
  // The clock is first read when the wait has spun kSpinPasses idle passes (or 64 passes):
  // an 8-byte operation usually completes before that and never reads it (~3 reads per call
  // were 10% of a 2-rank 8-byte all_reduce). So the timeout and the spin start that late.
  const double limit = timeout_s < 0 ? timeout_s_ : timeout_s;
  double deadline = 0;
  // An inline operation's caller counts as a waiter already (run_blocking's begin_will_wait),
  // and its end_will_wait wakes the progress thread if that is needed: two locked
  // instructions less per blocking call.
  constexpr bool counted = std::is_same<Op, InlineOp>::value;
  if (!counted) waiters_.fetch_add(1);
  Callbacks done;
  const IdlePolicy policy = idle_policy();
  double idle_since = 0;
  uint32_t passes = 0, idle_passes = 0;
  bool yield = policy.yield;
  while (!w->done()) {
    bool moved;
    {
      std::lock_guard<std::mutex> lock(mu_);
      moved = progress_once(&done);
    }
    run(done);
    if (w->done()) break;
    ++passes;
    idle_passes = moved ? 0 : idle_passes + 1;
    // A small operation completes within a few passes: spin those without reading the clock
    // (the deadline is checked every 64th pass). Past them, the clock is still read only on
    // every kSpinPasses-th idle pass: it decides when spinning turns into sleeping, which
    // needs no finer grain than a few passes (reading it on every pass of a wait for an 8-byte
    // answer was 7% of the call). Yielding (below) stays per pass.
    const bool look = (passes & 63) == 0 || (idle_passes > 0 && idle_passes % kSpinPasses == 0);
    if (!look) {
      // Oversubscribed (policy.yield), from the first idle pass: the rank we wait for may be
      // queued behind us on this core (4 ranks on 2 cores, 8-byte all_reduce: 5.4-6.0 us
      // yielding after 16 passes, 4.1 us from the first).
      // A pass that moved something (a message of several arrived) goes on without yielding:
      // the next may complete the operation (4 ranks on 2 cores, 8-byte all_reduce: 10.1 us
      // yielding after every pass, 7.8 us after idle passes only).
      if (yield && idle_passes > (policy.yield ? 0u : kSpinPasses)) sched_yield();
      continue;
    }
    const double now = now_s();
    if (deadline == 0) deadline = now + limit;
    if (idle_passes == kSpinPasses) idle_since = now;
    if (now > deadline) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!w->done()) {
        std::string what = inline_             ? inline_->task->waiting_for()
                           : !queue_.empty() ? queue_.front()->task->waiting_for()
                                             : std::string("?");
        fail_everything(Status(Code::kTimeout, w->label() + " did not complete within " +
                                                   seconds_text(limit) + "; waiting for " + what),
                        &done);
      }
      break;
    }
    if (idle_passes < kSpinPasses) continue;
    if (now - idle_since < policy.spin_s) {
      // Oversubscribed, or the peer we wait for spun on this very cpu: it may be queued behind us.
      if (idle_passes == kSpinPasses || (idle_passes & 255) == 0) yield = policy.yield || peer_on_my_cpu();
      if (yield) sched_yield();
      continue;
    }
    if (sleep_until_signalled(now - idle_since, &done)) idle_passes = 0;
  }
  if (!counted) waiters_.fetch_sub(1);
  run(done);
  if (!counted && waiters_.load() == 0) cv_.notify_one();
  return w->status();
}

void Engine::end_will_wait() {
  if (waiters_.fetch_sub(1) != 1) return;  // another waiter still drives the engine
  // Nothing queued (the blocking calls' usual case): no lock. A submit() that queues after
  // this load reads waiters_ after our decrement (both sequentially consistent), sees 0 and
  // wakes the progress thread itself.
  if (queued_.load() == 0) return;
  {
    // Under the lock: the progress thread checks waiters_ under mu_ before it sleeps, so the
    // wake-up below cannot fall between its check and its sleep.
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.empty()) return;
  }
  cv_.notify_one();
}

void Engine::poll_once() {
  Callbacks done;
  {
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) return;
    progress_once(&done);
  }
  run(done);
}

void Engine::thread_main() {
  name_this_thread("uccl-progress");
  Callbacks done;
  const IdlePolicy policy = idle_policy();
  double idle_since = now_s();
  while (!stop_.load()) {
    bool moved;
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (queue_.empty() || waiters_.load() > 0) {
        cv_.wait(lock, [&] { return stop_.load() || (!queue_.empty() && waiters_.load() == 0); });
        idle_since = now_s();
        if (stop_.load()) break;
      }
      moved = progress_once(&done);
    }
    run(done);
    const double now = now_s();
    if (moved) idle_since = now;
    else if (now - idle_since < policy.spin_s) {
      if (policy.yield) sched_yield();
    } else if (sleep_until_signalled(now - idle_since, &done)) {
      idle_since = now_s();
    }
  }
}

void Engine::abort(const Status& why) {
  Callbacks done;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fail_everything(why, &done);
  }
  run(done);
  cv_.notify_all();
}

Status Engine::error() {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

void Engine::shutdown() {
  bool first;
  {
    // Under the lock: the progress thread tests stop_ under mu_ before it sleeps, so setting
    // it without the lock could fall between that test and the sleep and the wake-up be lost
    // (a rank's exit then hung in join(): seen in the topology loopback tests under load).
    std::lock_guard<std::mutex> lock(mu_);
    first = !stop_.exchange(true);
  }
  if (first) {
    cv_.notify_all();
    if (thread_.joinable()) {
      if (thread_.get_id() == std::this_thread::get_id()) thread_.detach();
      else thread_.join();
    }
    Callbacks done;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!queue_.empty()) fail_everything(Status(Code::kAborted, "communicator destroyed with operations pending"), &done);
      conns_->close_all();
    }
    // Once more on the way out of a failed job: a peer killed a moment ago may only now have
    // dropped the lock on a segment it was creating.
    if (failed_flag_.load()) remove_dead_peers_leftovers();
    run(done);
  }
}

std::string Engine::describe() {
  std::string s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = conns_->describe();
  }
  if (!any_device_memory()) return s;
  // How this communicator's wait(stream=) holds a stream back on each device that may own memory
  // here (it differs between communicators of one process: base/device.h stream_wait_for).
  for (DeviceBackend* b : device_backends()) {
    std::string why;
    if (!b->available(&why) || !b->may_own_memory()) continue;
    const StreamWaitMode m = stream_wait_for(b, owns_signal_waits_, &why);
    s += std::string("  stream waits on ") + b->name() + ": " + stream_wait_mode_name(m) +
         (m == StreamWaitMode::kHost ? " (" + why + ")" : "") + "\n";
  }
  return s;
}

}  // namespace uccl
