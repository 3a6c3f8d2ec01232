// Engine: runs one communicator's operations, in issue order, as state machines.
//
// Who drives progress (the "progress model"):
//  * A thread in Work::wait() drives the engine itself: lowest latency, no thread hand-off.
//  * A background progress thread drives it only while operations are pending and nobody is
//    waiting, so asynchronous work (torch futures, compute overlap) still completes. It sleeps
//    on a condition variable otherwise; with UCCL_PROGRESS_THREAD=0 there is none, and
//    is_completed() makes one progress pass (MPI_Test style).
//  * A caller that issues and then waits itself says so with Communicator::will_wait(): it
//    counts as a waiter from before the submit, so the progress thread is not woken at all
//    (no futex wake, no context switch, no second thread contending for the lock and cores).
//  * An idle driver spins (UCCL_SPIN_US, yielding between passes when the host has more ranks
//    than cores), then sleeps until a peer's write wakes it (shm futex doorbells, tcp epoll
//    fds): no timer-driven polling. See core/idle_wait.h for why and the measurements.
//
// Failure model: the first error fails the communicator (like NCCL): every queued operation
// fails, the connections are closed so that peers notice at once instead of at their
// timeout, and new operations are refused with the original cause.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/schedule_executor.h"
#include "uccl/communicator.h"
#include "core/connection_manager.h"
#include "core/idle_wait.h"

namespace uccl {

class Engine;

class OpWork : public Work {
 public:
  OpWork(std::shared_ptr<Engine> engine, Collective coll) : engine_(std::move(engine)), coll_(coll) {}
  Status wait(double timeout_s) override;
  bool is_completed() override;
  Status status() override;
  uint64_t seq() const override { return seq_; }
  Collective collective() const override { return coll_; }
  OpStats stats() override;
  void on_complete(std::function<void(const Status&)> fn) override;
  Status wait_stream(uintptr_t stream) override;

  bool done() const { return state_.load(std::memory_order_acquire) != 0; }
  // Records the result and appends the completion callbacks to run outside the engine lock.
  void finish(const Status& s, std::vector<std::function<void()>>* deferred);
  std::string label() const;  // "all_reduce #12"

  std::unique_ptr<ScheduleTask> task;
  OpStats stats_;
  MemoryLoc mem;  // where the operation's buffers live (wait_stream: whose streams)
  uint64_t seq_ = 0;
  double deadline = 0;  // 0 until progress_once() first reads the clock for it (at the head of the queue)

 private:
  std::shared_ptr<Engine> engine_;
  Collective coll_;
  std::atomic<int> state_{0};  // 0 pending, 1 finished (status_ says how)
  std::mutex mu_;
  Status status_;
  std::vector<std::function<void(const Status&)>> callbacks_;
  // wait_stream's signals: raised inside finish(), not with the deferred callbacks, so a waiting
  // stream is released before the engine starts the next operation (whose device calls could
  // otherwise wait for that stream: cudaIpcOpenMemHandle may synchronize the device).
  std::vector<std::shared_ptr<DeviceSignal>> signals_;
};

// An operation the calling thread runs without a Work or a queue entry (Engine::run_inline,
// the express path of the blocking calls, core/express.cc).
struct InlineOp {
  ScheduleTask* task = nullptr;
  Collective coll = Collective::kAllReduce;
  uint64_t seq = 0;
  Status result;  // valid once done()
  std::atomic<bool> finished{false};  // set under the engine lock; another waiter may drive it
  bool done() const { return finished.load(std::memory_order_acquire); }
  Status status() const { return result; }
  std::string label() const;
  void finish(const Status& s) {
    result = s;
    finished.store(true, std::memory_order_release);
  }
};

class Engine {
 public:
  Engine(int rank, int size, std::unique_ptr<ConnectionManager> conns, double timeout_s);
  ~Engine();
  void start_progress_thread();
  // Queues an operation. Fails at once (without queuing) if the communicator already failed.
  Status submit(const std::shared_ptr<OpWork>& w);
  Status wait(OpWork* w, double timeout_s);
  // The express path (core/express.cc). run_inline(): if nothing is queued or running and the
  // communicator has not failed, restarts op->task as operation op->seq (under the lock:
  // nothing else executes on the ExecState then), makes `op` the running operation, sets
  // *issued_seq = op->seq and releases *issue_lock (the communicator's issue lock, held by the
  // caller until then, so whatever is issued later queues behind it), sets *started and drives
  // the operation to its end in this thread; a failure fails the communicator like any
  // operation's. Returns its status (Ok with *started false when it did not start).
  // A task with a tiny plan (ScheduleTask::tiny_ready) is driven on its own endpoints first:
  // under the lock for up to kTinySpinS, or, where the idle policy yields, yielding between
  // polls with the lock released for as long as the policy spins; any other, or one whose
  // peer is late, waits like wait() (progress_once runs it before the queue). The caller
  // counts as a waiter around it (begin_will_wait/end_will_wait), as run() does.
  Status run_inline(InlineOp* op, std::unique_lock<std::mutex>* issue_lock, uint64_t* issued_seq, double timeout_s,
                    bool* started);
  bool idle();  // what run_inline checks, without starting anything
  // Communicator::will_wait(): counts as a waiter, so submit() does not wake the progress
  // thread; end_will_wait() wakes it if operations are left and nobody else waits.
  void begin_will_wait() { waiters_.fetch_add(1); }
  void end_will_wait();
  // One non-blocking progress pass if the engine is free (for is_completed()).
  void poll_once();
  void abort(const Status& why);
  Status error();
  // error() without the lock for the common case: false until the communicator failed.
  bool has_failed() const { return failed_flag_.load(std::memory_order_acquire); }
  void shutdown();
  std::string describe();
  double timeout_s() const { return timeout_s_; }
  // Whether this communicator's stream waits may go by signal under UCCL_STREAM_WAIT=auto: the
  // first engine made in the process claims that, until it is destroyed; then the next one made
  // does (base/device.h stream_wait_for says why only one).
  bool owns_signal_waits() const { return owns_signal_waits_; }
  ConnectionManager* conns() { return conns_.get(); }
  std::mutex& mutex() { return mu_; }

 private:
  using Callbacks = std::vector<std::function<void()>>;
  bool progress_once(Callbacks* done);  // requires mu_
  // After a pass of the inline operation: fails everything on an error (which finishes it) or
  // finishes it when done. Returns whether it ended either way (requires mu_).
  bool settle_inline(const Status& s, bool finished, Callbacks* done);
  // One step of a task: progress, and once more after the endpoints moved (requires mu_).
  Status step(ScheduleTask* t, bool* finished, bool* moved);
  // Engine::wait's loop, for an OpWork or an InlineOp (done(), label(), status()).
  template <class Op>
  Status wait_for(Op* w, double timeout_s);
  void fail_everything(const Status& why, Callbacks* done);  // requires mu_
  void thread_main();
  // Sleeps until a pending endpoint is signalled, or at most a few milliseconds (longer the
  // longer nothing has moved: `idle` seconds). Returns true if the pass after arming moved
  // something instead (then it did not sleep).
  bool sleep_until_signalled(double idle, Callbacks* done);
  void disarm_all();  // requires mu_
  // Tells the pending endpoints' peers which cpu this thread spins on; true if one of them
  // spins on the same one (unpinned ranks the scheduler put together: yield to it).
  bool peer_on_my_cpu();
  static constexpr double kFarewellSeconds = 0.2;  // fail_everything's wait for abort notes to land
  // How long run_inline spins on a tiny task under the lock before it waits like wait(): a few
  // 8-byte steps' worth; longer would hold off other threads' submits behind a late peer.
  static constexpr double kTinySpinS = 20e-6;
  static constexpr uint32_t kSpinPasses = 16;  // passes of Engine::wait spun before the clock is read
  static void run(Callbacks& cbs);

  const int rank_, size_;
  std::unique_ptr<ConnectionManager> conns_;
  const double timeout_s_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<OpWork>> queue_;
  InlineOp* inline_ = nullptr;  // the express operation running ahead of the queue (under mu_)
  Status failed_;
  Status cause_for_peers_;  // the root cause, handed to endpoints (they forward it to the peer)
  uint32_t passes_ = 0;     // progress passes (under mu_), for the occasional deadline check
  bool armed_ = false;      // endpoints were armed for a sleep (under mu_): disarm on the next pass
  std::atomic<bool> failed_flag_{false};
  std::atomic<int> waiters_{0};
  std::atomic<size_t> queued_{0};  // queue_.size(), stored under mu_; end_will_wait reads it without the lock
  std::atomic<bool> stop_{false};
  std::thread thread_;
  bool owns_signal_waits_ = false;
};

}  // namespace uccl
