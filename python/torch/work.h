// The c10d::Work that torch sees for one uccl operation (or a coalesced batch of them).
//
// Completion has two phases, on purpose:
//   1. "done": every uccl Work finished; staged outputs are copied back into the caller's
//      tensors; c10d::Work::finish() records success or the exception. Cheap, runs no user code,
//      so whichever thread gets there first does it (a waiting caller, or the completion thread).
//   2. "future": the c10::ivalue::Future is marked, which runs user callbacks inline (DDP comm
//      hooks, fut.then(...)). Only the per-backend CompletionQueue's threads do this, because
//      uccl's on_complete runs on its progress thread and must not block or re-enter the
//      communicator - and a comm hook typically launches the next collective.
// Futures are handed to the queue in issue order (uccl completes in issue order).
//
// Device memory uccl owns (CUDA, the simulated device) is used in place: the op is ordered on the
// tensor's current stream, and wait() makes the current stream wait (use_device). The Future
// still completes on the host, once the device work is done.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "uccl/communicator.h"

namespace uccl_torch {

// Runs fn with the GIL released when the calling thread holds it. fn joins threads that may be
// waiting for the GIL: a future callback on a completion thread, or uccl's progress thread
// dropping the last reference to a tensor whose Python object lives (torch then decrefs it
// under the GIL) - joining those with the GIL held deadlocks (seen: a group shut down while
// its DDP buckets' tensors were released). Returns false, without running fn, while the
// interpreter is finalizing: no thread gets the GIL again, so the caller lets go instead.
bool run_without_gil(const std::function<void()>& fn);

// Runs posted functions (future completions) on its own threads, never on uccl's progress thread.
// A Future callback may block on another work's Future (PowerSGD's hook issues an all_reduce in
// a callback and waits on it), so a busy thread must never keep later completions waiting: when
// every thread is busy or spoken for, post() starts another (up to kMaxThreads). Threads start
// on demand, so a group that is never used costs none. After stop(), post() runs fn inline so
// that late completions (e.g. failures delivered by abort) still settle their futures.
class CompletionQueue {
 public:
  static constexpr size_t kMaxThreads = 16;
  CompletionQueue() = default;
  ~CompletionQueue();
  void post(std::function<void()> fn);
  void stop();  // runs what is queued, then joins (a thread calling it from inside is detached)

 private:
  // Shared with the threads, so that one detached by stop() never touches a freed queue.
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::function<void()>> q;
    size_t busy = 0;  // threads running a function
    bool stop = false;
  };
  static void loop(std::shared_ptr<State> st);
  std::shared_ptr<State> st_ = std::make_shared<State>();
  std::vector<std::thread> threads_;  // guarded by st_->mu
};

// Bytes a process group moved since it was made, summed over its finished ops (by transport and
// by topology level of the peer): what uccl.parallel reports per group and step.
struct TrafficTotals {
  std::mutex mu;
  uccl::OpStats sum;
  uint64_t ops = 0;
  void add(const uccl::OpStats& s);
};

// The group's on-completion hook (ProcessGroup._register_on_completion_hook, NCCL's alone in
// torch): fired once per finished work, success or failure, on a CompletionQueue thread after its
// Future settled, with the op type, sequence number, start (issue) and finish times. Hooks of
// works finishing together may run on different threads at once (NCCL runs them on one thread).
// It also counts the group's works started and not yet settled, so that waitForPendingWorks
// (torch's destroy_process_group calls it on a group with a hook) returns once every work's
// Future and hook have run.
struct CompletionHook {
  std::mutex mu;
  std::condition_variable all_settled;
  std::function<void(std::shared_ptr<c10d::WorkInfo>)> fn;
  uint64_t unsettled = 0;  // works started whose Future (and hook) have not yet run
  void started();
  // Runs the hook (if any) for a work whose Future just settled, then counts it settled.
  void settled(const std::shared_ptr<c10d::WorkInfo>& info);
  void wait_all_settled();
};

class UcclWork : public c10d::Work {
 public:
  UcclWork(int rank, c10d::OpType type, const char* profiling_title, uint64_t seq, std::string what,
           std::vector<at::Tensor> outputs, double timeout_s, std::shared_ptr<CompletionQueue> cq);
  ~UcclWork() override;

  // Building (before start()).
  void add(uccl::WorkPtr w) { works_.push_back(std::move(w)); }
  void add_dep(c10::intrusive_ptr<UcclWork> w) { deps_.push_back(std::move(w)); }
  void add_epilogue(std::function<void()> fn) { epilogues_.push_back(std::move(fn)); }
  void drop_epilogues() { epilogues_.clear(); }  // an estimated op: nothing to copy back
  void keep_alive(at::Tensor t) { keep_.push_back(std::move(t)); }
  // The op uses device memory in place (convert.h: device_direct): it is ordered after the
  // work queued on that device's current stream (stream() goes into uccl's args), and wait()
  // makes the caller's current stream wait instead of the host, as ProcessGroupNCCL's does.
  // The first device named wins (one device per process and op).
  void use_device(const at::Device& d);
  const std::optional<at::Device>& device() const { return device_; }
  // barrier(): after the host wait, the caller's current stream of `d` is synchronized too.
  void sync_stream_after_wait(const at::Device& d) { sync_after_wait_ = d; }
  uintptr_t stream() const { return stream_; }
  void count_into(std::shared_ptr<TrafficTotals> t) { traffic_ = std::move(t); }
  void report_to(std::shared_ptr<CompletionHook> h) { hook_ = std::move(h); }
  // Arms completion: from here on the work completes by itself.
  void start();
  bool started() const { return started_.load(); }
  bool has_ops() const { return !works_.empty() || !deps_.empty(); }

  // c10d::Work.
  bool isCompleted() override { return done_.load(); }
  std::vector<at::Tensor> result() override { return outputs_; }
  // CPU: the data is in place once isCompleted() is true. Device ops: the current stream waits.
  void synchronize() override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  uint64_t getSequencenumber() const override { return seq_; }
  // recv without a source (recvAnysource): the group rank the message came from, once done.
  int sourceRank() const override;
  void set_any_source() { any_source_ = true; }
  float getDuration() const override;

  const std::string& what() const { return what_; }

 private:
  void arrive(const uccl::Status& s);    // one uccl work or dependency finished
  void finish_once(uccl::Status s);      // phase 1
  void settle_future();                  // phase 2 (a CompletionQueue thread)
  void on_done(std::function<void()> fn);  // for dependents
  // Device ops whose results need no host step (no staging copy-back): the current stream can
  // wait for them (uccl::Work::wait_stream) instead of the host.
  bool stream_waitable() const;
  uccl::Status wait_on_current_stream();

  const uint64_t seq_;
  const std::string what_;  // "all_reduce #12" for error messages
  std::vector<at::Tensor> outputs_;
  const double timeout_s_;
  std::shared_ptr<CompletionQueue> cq_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;

  std::vector<uccl::WorkPtr> works_;
  std::vector<c10::intrusive_ptr<UcclWork>> deps_;
  std::vector<std::function<void()>> epilogues_;
  std::vector<at::Tensor> keep_;
  std::shared_ptr<TrafficTotals> traffic_;
  std::shared_ptr<CompletionHook> hook_;
  std::optional<at::Device> device_;
  uintptr_t stream_ = 0;
  std::optional<at::Device> sync_after_wait_;

  bool any_source_ = false;
  std::atomic<int> source_{-1};
  std::atomic<bool> started_{false};
  std::atomic<int> pending_{0};
  std::mutex status_mu_;
  uccl::Status first_error_;
  std::once_flag finish_once_;
  std::atomic<bool> done_{false};
  std::vector<std::function<void()>> done_listeners_;
  std::chrono::steady_clock::time_point t_start_, t_end_;
};

}  // namespace uccl_torch
