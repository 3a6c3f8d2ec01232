#include "work.h"

#include <pybind11/pybind11.h>

#include <iostream>

#include "convert.h"

namespace uccl_torch {

// ---------------------------------------------------------------------------------------------
// CompletionQueue

CompletionQueue::~CompletionQueue() { stop(); }

void CompletionQueue::post(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lk(st_->mu);
    if (!st_->stop) {
      st_->q.push_back(std::move(fn));
      // Every queued item needs a thread that is not stuck in an earlier callback.
      if (st_->busy + st_->q.size() > threads_.size() && threads_.size() < kMaxThreads) {
        threads_.emplace_back([st = st_] { loop(st); });
      } else {
        st_->cv.notify_one();
      }
      return;
    }
  }
  fn();  // stopped: settle late completions on the caller's thread rather than never
}

void CompletionQueue::loop(std::shared_ptr<State> st) {
  std::unique_lock<std::mutex> lk(st->mu);
  for (;;) {
    st->cv.wait(lk, [&] { return st->stop || !st->q.empty(); });
    if (st->q.empty()) return;  // stopped and drained
    std::function<void()> fn = std::move(st->q.front());
    st->q.pop_front();
    ++st->busy;
    lk.unlock();
    try {
      fn();
    } catch (const std::exception& e) {
      // A user future callback threw and nobody chained on it; keep serving other works.
      std::cerr << "uccl torch backend: exception in a completion callback: " << e.what() << std::endl;
    }
    fn = nullptr;  // drop captured works here, outside the lock
    lk.lock();
    --st->busy;
  }
}

void CompletionQueue::stop() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lk(st_->mu);
    st_->stop = true;
    threads.swap(threads_);
    st_->cv.notify_all();
  }
  auto join_all = [&] {
    for (auto& t : threads) {
      if (t.get_id() == std::this_thread::get_id()) {
        t.detach();  // the last reference was dropped inside a callback on this thread
      } else if (t.joinable()) {
        t.join();
      }
    }
  };
  // A thread may be running a Python future callback that needs the GIL, which our caller
  // (a Python thread dropping the process group) may hold.
  if (!run_without_gil(join_all))
    for (auto& t : threads) t.detach();
}

bool run_without_gil(const std::function<void()>& fn) {
  if (Py_IsInitialized() && PyGILState_Check()) {
#if PY_VERSION_HEX >= 0x030D0000
    if (Py_IsFinalizing()) return false;
#else
    if (_Py_IsFinalizing()) return false;
#endif
    pybind11::gil_scoped_release nogil;
    fn();
    return true;
  }
  fn();
  return true;
}

void TrafficTotals::add(const uccl::OpStats& s) {
  std::lock_guard<std::mutex> lk(mu);
  for (int k = 0; k < uccl::kMaxTransports; ++k) {
    sum.bytes_sent_by_transport[k] += s.bytes_sent_by_transport[k];
    sum.bytes_received_by_transport[k] += s.bytes_received_by_transport[k];
  }
  for (int l = 0; l < 3; ++l) {
    sum.bytes_sent_by_level[l] += s.bytes_sent_by_level[l];
    sum.bytes_received_by_level[l] += s.bytes_received_by_level[l];
  }
  ++ops;
}

// ---------------------------------------------------------------------------------------------
// UcclWork

UcclWork::UcclWork(int rank, c10d::OpType type, const char* profiling_title, uint64_t seq, std::string what,
                   std::vector<at::Tensor> outputs, double timeout_s, std::shared_ptr<CompletionQueue> cq)
    : c10d::Work(rank, type, profiling_title),
      seq_(seq),
      what_(std::move(what)),
      outputs_(std::move(outputs)),
      timeout_s_(timeout_s),
      cq_(std::move(cq)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

UcclWork::~UcclWork() = default;

void UcclWork::start() {
  t_start_ = std::chrono::steady_clock::now();
  if (hook_) hook_->started();
  // +1 guards against reaching zero while callbacks are still being attached (on_complete runs
  // fn at once when the uccl work already finished).
  pending_.store(static_cast<int>(works_.size() + deps_.size()) + 1);
  started_.store(true);
  for (auto& w : works_) {
    auto self = c10::intrusive_ptr<UcclWork>::unsafe_reclaim_from_nonowning(this);
    w->on_complete([self](const uccl::Status& s) { self->arrive(s); });
  }
  for (auto& d : deps_) {
    auto self = c10::intrusive_ptr<UcclWork>::unsafe_reclaim_from_nonowning(this);
    d->on_done([self] { self->arrive(uccl::Status::Ok()); });  // its error is read in finish_once
  }
  arrive(uccl::Status::Ok());
}

void UcclWork::arrive(const uccl::Status& s) {
  if (!s.ok()) {
    std::lock_guard<std::mutex> lk(status_mu_);
    if (first_error_.ok()) first_error_ = s;
  }
  if (pending_.fetch_sub(1) != 1) return;
  uccl::Status st;
  {
    std::lock_guard<std::mutex> lk(status_mu_);
    st = first_error_;
  }
  auto self = c10::intrusive_ptr<UcclWork>::unsafe_reclaim_from_nonowning(this);
  cq_->post([self, st] {
    self->finish_once(st);
    self->settle_future();
  });
}

void UcclWork::finish_once(uccl::Status s) {
  std::call_once(finish_once_, [&] {
    std::exception_ptr eptr;
    if (!s.ok()) eptr = to_exception(s, what_);
    for (auto& d : deps_) {
      if (!eptr) eptr = d->exception();
    }
    // Outputs are copied back only on success: a failed op leaves the caller's tensors as they
    // were (staged ops) rather than half-written.
    if (!eptr) {
      try {
        for (auto& fn : epilogues_) fn();
      } catch (...) {
        eptr = std::current_exception();
      }
    }
    if (any_source_ && !eptr) {
      for (auto& w : works_) {
        const int src = w->stats().source;
        if (src >= 0) source_.store(src);
      }
    }
    if (traffic_ && !eptr) {
      for (auto& w : works_) traffic_->add(w->stats());
    }
    t_end_ = std::chrono::steady_clock::now();
    finish(eptr);
    std::vector<std::function<void()>> listeners;
    {
      std::lock_guard<std::mutex> lk(status_mu_);
      done_.store(true);
      listeners.swap(done_listeners_);
    }
    for (auto& fn : listeners) fn();
  });
}

int UcclWork::sourceRank() const {
  TORCH_CHECK(any_source_, "uccl: sourceRank() is only defined for a recv without a source rank (recvAnysource)");
  const int src = source_.load();
  TORCH_CHECK(src >= 0, "uccl: sourceRank() of ", what_, ": the receive has not completed (wait() for it first)");
  return src;
}

void UcclWork::on_done(std::function<void()> fn) {
  {
    std::lock_guard<std::mutex> lk(status_mu_);
    if (!done_.load()) {
      done_listeners_.push_back(std::move(fn));
      return;
    }
  }
  fn();
}

void CompletionHook::started() {
  std::lock_guard<std::mutex> lk(mu);
  ++unsettled;
}

void CompletionHook::settled(const std::shared_ptr<c10d::WorkInfo>& info) {
  std::function<void(std::shared_ptr<c10d::WorkInfo>)> f;
  {
    std::lock_guard<std::mutex> lk(mu);
    f = fn;
  }
  if (f) {
    try {
      f(info);
    } catch (const std::exception& e) {
      // The caller is long gone: a hook's exception has nowhere to go but the log (NCCL's does the same).
      TORCH_WARN("uccl: the on-completion hook raised: ", e.what());
    }
  }
  std::lock_guard<std::mutex> lk(mu);
  if (--unsettled == 0) all_settled.notify_all();
}

void CompletionHook::wait_all_settled() {
  std::unique_lock<std::mutex> lk(mu);
  all_settled.wait(lk, [&] { return unsettled == 0; });
}

void UcclWork::settle_future() {
  // Every uccl work has finished (pending_ reached 0), so staging buffers may go now - not
  // earlier: after a timed-out wait() uccl may still be writing into them.
  keep_.clear();
  epilogues_.clear();
  auto ex = exception();
  if (ex) {
    future_->setError(ex);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
  if (hook_) {
    hook_->settled(std::make_shared<c10d::WorkInfo>(retrieveOpType(), seq_, t_start_, t_end_,
                                                    std::chrono::duration<float>(t_end_ - t_start_)));
  }
}

void UcclWork::use_device(const at::Device& d) {
  if (device_) return;
  device_ = d;
  stream_ = current_stream_handle(d);
}

bool UcclWork::stream_waitable() const {
  // A receive from any source: torch reads sourceRank() right after wait(), so the host waits.
  if (!device_ || !epilogues_.empty() || any_source_) return false;
  for (auto& d : deps_)
    if (!d->stream_waitable()) return false;
  return true;
}

uccl::Status UcclWork::wait_on_current_stream() {
  const uintptr_t h = current_stream_handle(*device_);
  for (auto& w : works_) {
    uccl::Status s = w->wait_stream(h);
    if (!s.ok()) return s;
  }
  for (auto& d : deps_) {
    uccl::Status s = d->wait_on_current_stream();
    if (!s.ok()) return s;
  }
  return uccl::Status::Ok();
}

void UcclWork::synchronize() {
  if (!done_.load() && stream_waitable() && wait_on_current_stream().ok()) return;
  if (device_) wait();
}

bool UcclWork::wait(std::chrono::milliseconds timeout) {
  TORCH_CHECK(started_.load(), "uccl: wait() on ", what_,
              " inside its coalescing block; wait on the works returned when the block ends");
  // A device op in flight: the caller's current stream waits for it, the host does not
  // (ProcessGroupNCCL's wait()). Its error, if any, comes from the next wait on a finished
  // work, is_completed()/exception(), or the group's next op. Where the backend cannot make a
  // stream wait (wait_stream answers NotSupported), the host waits below.
  if (!done_.load() && timeout == kNoTimeout && stream_waitable() && wait_on_current_stream().ok()) return true;
  using clock = std::chrono::steady_clock;
  // kNoTimeout (0) means "the op's timeout"; a negative op timeout means uccl's default.
  bool use_default = timeout == kNoTimeout && timeout_s_ < 0;
  double total_s = timeout == kNoTimeout ? timeout_s_ : timeout.count() / 1000.0;
  auto deadline = clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(total_s));
  uccl::Status first;
  for (auto& w : works_) {
    double left = use_default ? -1.0 : std::max(0.0, std::chrono::duration<double>(deadline - clock::now()).count());
    uccl::Status st = w->wait(left);
    if (!st.ok() && first.ok()) first = st;
  }
  for (auto& d : deps_) {
    try {
      d->wait(timeout);
    } catch (...) {
      // finish_once() takes the dependency's exception as ours
    }
  }
  finish_once(first);
  {
    std::lock_guard<std::mutex> lk(mutex_);
    if (exception_) std::rethrow_exception(exception_);
  }
  if (sync_after_wait_) {
    c10::impl::VirtualGuardImpl impl(sync_after_wait_->type());
    impl.synchronizeStream(impl.getStream(*sync_after_wait_));
  }
  return true;
}

float UcclWork::getDuration() const {
  TORCH_CHECK(done_.load(), "uccl: getDuration() on ", what_, " before it completed");
  return std::chrono::duration<float, std::milli>(t_end_ - t_start_).count();
}

}  // namespace uccl_torch
