// The express path of the blocking calls (Communicator::run, issue 18: latency at Open MPI's level).
//
// Why: an 8-byte all_reduce between two ranks spent ~1 us per call here against Open MPI's
// ~0.45, and the wire was the small part: a Work allocated, locked and finished per call, a
// schedule task and its builder allocated, the schedule rebuilt, the engine's queue pushed and
// popped under two locks. A blocking call needs none of it when the communicator is idle: the
// caller runs the operation itself, now, ahead of anything issued after it.
//
// What: run(args) passes an Express to the collective's *_impl. When the engine is idle
// (nothing queued or running; checked under the issue lock, so nothing can be queued before
// it starts) and the buffers are host memory, the operation runs as the engine's inline
// operation (Engine::run_inline: progress_once drives it before the queue, the wait is
// Engine::wait's, and a failure fails the communicator as any operation's does). Its
// task is kept with the call's key (collective, count, dtype, op, root, buffers, scalar): the
// next call with the same key restarts it (ScheduleTask::restart) and runs the schedule it
// built, without building anything, unless another operation's schedule replaced it. The task
// and its messages are exactly what the asynchronous call makes (same builder, same operation
// numbers and envelopes), so ranks may mix blocking and asynchronous calls freely. From its
// second run on, a task whose messages are all small runs from its tiny plan, polling only its
// own endpoints (core/schedule_tiny.cc): the 8-byte all_reduce at Open MPI's latency.
// Otherwise (busy engine, device memory) run() issues the call and waits for its Work.
#include "base/config.h"
#include "core/communicator_impl.h"

namespace uccl {

const BoolSetting kExpress("general", "UCCL_EXPRESS", "1",
                           "blocking calls on an idle communicator run inline on a cached schedule "
                           "(0: issue and wait, for comparison)",
                           boolean());

bool CommunicatorImpl::ExpressKey::same(const ExpressKey& o) const {
  return c.coll == o.c.coll && c.count == o.c.count && c.dtype == o.c.dtype && c.op == o.c.op && c.root == o.c.root &&
         send == o.send && recv == o.recv && scalar == o.scalar;
}

bool CommunicatorImpl::express_start(std::unique_lock<std::mutex>& issue_lock, Express* x) {
  InlineOp op;
  op.task = &*express_task_;
  op.coll = x->key.c.coll;
  op.seq = coll_seq_ + 1;
  bool started = false;
  // Restarts the task as operation op.seq, sets coll_seq_ and releases the issue lock once it
  // is the running operation, then drives it to its end.
  Status s = engine_->run_inline(&op, &issue_lock, &coll_seq_, x->timeout_s, &started);
  if (!started) return false;
  x->status = s;
  x->ran = true;
  return true;
}

bool CommunicatorImpl::express_cached(const Call& c, const MemoryLoc& mem, Express* x) {
  if (mem.is_device() || !express_on_) return false;
  x->key.c = c;
  std::unique_lock<std::mutex> lock(issue_mu_);
  if (!express_task_ || !express_key_.same(x->key)) return false;
  return express_start(lock, x);
}

bool CommunicatorImpl::express_new(const Call& c, ScheduleTask::Builder& build, const MemoryLoc& mem, Express* x) {
  if (mem.is_device() || !express_on_) return false;
  x->key.c = c;
  auto env = make_env(c, mem, 0, nullptr);  // no Work, so no statistics to count for one
  if (!env.ok()) return false;  // issue() meets the same error and reports it
  std::unique_lock<std::mutex> lock(issue_mu_);
  if (!engine_->idle()) return false;
  express_task_.reset();
  express_task_.emplace(env.take(), engine_->conns(), &exec_, c.dtype, c.op, std::move(build));
  express_key_ = x->key;
  if (!express_start(lock, x)) {
    // Under the issue lock nothing could have been queued since idle(): the communicator failed
    // meanwhile (abort from another thread). The builder is in the task now, so report it here.
    x->status = engine_->error();
    x->ran = true;
  }
  return true;
}

// The blocking caller counts as a waiter from before the call (Communicator::will_wait), so an
// operation that does get queued does not wake the progress thread.
template <class Args>
Status CommunicatorImpl::run_blocking(Result<WorkPtr> (CommunicatorImpl::*impl)(const Args&, Express*), const Args& a,
                                      double scalar, double timeout_s) {
  engine_->begin_will_wait();
  Express x{{Call{}, a.send, a.recv, scalar}, timeout_s, Status::Ok(), false};
  Result<WorkPtr> w = (this->*impl)(a, &x);
  Status s = !w.ok() ? w.status() : x.ran ? x.status : w.value()->wait(timeout_s);
  engine_->end_will_wait();
  return s;
}

Status CommunicatorImpl::run(const AllReduceArgs& a, double t) { return run_blocking(&CommunicatorImpl::all_reduce_impl, a, a.scalar, t); }
Status CommunicatorImpl::run(const ReduceArgs& a, double t) { return run_blocking(&CommunicatorImpl::reduce_impl, a, a.scalar, t); }
Status CommunicatorImpl::run(const BroadcastArgs& a, double t) { return run_blocking(&CommunicatorImpl::broadcast_impl, a, 0.0, t); }
Status CommunicatorImpl::run(const AllGatherArgs& a, double t) { return run_blocking(&CommunicatorImpl::all_gather_impl, a, 0.0, t); }
Status CommunicatorImpl::run(const ReduceScatterArgs& a, double t) {
  return run_blocking(&CommunicatorImpl::reduce_scatter_impl, a, a.scalar, t);
}

// ---- the defaults of other Communicator implementations: issue, then wait -------------------

namespace {
template <class Args>
Status issue_and_wait(Communicator& c, Result<WorkPtr> (Communicator::*fn)(const Args&), const Args& a, double timeout_s) {
  std::shared_ptr<void> waiting = c.will_wait();
  auto w = (c.*fn)(a);
  if (!w.ok()) return w.status();
  return w.value()->wait(timeout_s);
}
}  // namespace

Status Communicator::run(const AllReduceArgs& a, double t) { return issue_and_wait(*this, &Communicator::all_reduce, a, t); }
Status Communicator::run(const ReduceArgs& a, double t) { return issue_and_wait(*this, &Communicator::reduce, a, t); }
Status Communicator::run(const BroadcastArgs& a, double t) { return issue_and_wait(*this, &Communicator::broadcast, a, t); }
Status Communicator::run(const AllGatherArgs& a, double t) { return issue_and_wait(*this, &Communicator::all_gather, a, t); }
Status Communicator::run(const ReduceScatterArgs& a, double t) { return issue_and_wait(*this, &Communicator::reduce_scatter, a, t); }

}  // namespace uccl
