// The simulated device's streams and events (private to sim_device.cc; see sim_device.h for
// why the simulation is faithful): a stream is a worker thread running its tasks in order, with
// a sticky error after a failure as CUDA has; an event is a recorded / completed count.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "base/device.h"
#include "base/thread_name.h"

namespace uccl {

class SimBackend;

// The live streams: their addresses are the handles a user may wrap (SimBackend::wrap_stream).
inline std::mutex& live_sim_streams_mu() {
  static std::mutex mu;
  return mu;
}
inline std::set<const void*>& live_sim_streams() {
  static std::set<const void*> s;
  return s;
}

// A worker thread executing tasks in order; a failed task makes the stream's error sticky.
class SimStream final : public DeviceStream {
 public:
  SimStream(const SimBackend* owner, int ordinal) : owner_(owner), ordinal_(ordinal), worker_([this] { run(); }) {
    add_device_host_threads(1);  // the worker copies with the host's CPUs (base/device.h)
    std::lock_guard<std::mutex> lock(live_sim_streams_mu());
    live_sim_streams().insert(this);
  }
  ~SimStream() override {
    {
      std::lock_guard<std::mutex> lock(live_sim_streams_mu());
      live_sim_streams().erase(this);
    }
    add_device_host_threads(-1);
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  int ordinal() const override { return ordinal_; }
  bool external() const override { return false; }
  uintptr_t handle() const override { return reinterpret_cast<uintptr_t>(this); }
  const SimBackend* owner() const { return owner_; }
  FutexBell* completion_bell() override { return &bell_; }
  // A test's stand-in for a CUDA graph capture on this stream (SimBackend::set_capturing).
  std::atomic<bool> capturing{false};

  void enqueue(std::function<Status(const Status& sticky)> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      q_.push_back(std::move(task));
      ++enqueued_;
    }
    cv_.notify_all();
  }
  Status error() {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }
  Status synchronize() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t target = enqueued_;
    done_cv_.wait(lock, [&] { return completed_ >= target; });
    return error_;
  }

 private:
  void run() {
    name_this_thread(("uccl-sim-d" + std::to_string(ordinal_)).c_str());
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !q_.empty(); });
      if (q_.empty()) return;  // stop_ and drained
      std::function<Status(const Status& sticky)> task = std::move(q_.front());
      q_.pop_front();
      const Status sticky = error_;
      lock.unlock();
      // After a failure the stream is broken (like a sticky CUDA error): work tasks skip
      // themselves when `sticky` is set, event markers report it.
      Status s = task(sticky);
      bell_.ring();  // after the task's effects (an event marked, a copy made), seen by the waker
      lock.lock();
      if (!s.ok() && error_.ok()) error_ = s;
      ++completed_;
      done_cv_.notify_all();
    }
  }
  const SimBackend* owner_;
  int ordinal_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<std::function<Status(const Status& sticky)>> q_;
  uint64_t enqueued_ = 0, completed_ = 0;
  bool stop_ = false;
  Status error_;
  FutexBell bell_{};  // rung after each task (DeviceStream::completion_bell)
  std::thread worker_;  // last: started after the members above exist
};

// A user's stream given by handle: forwards to the stream, does not own it.
class SimStreamRef final : public DeviceStream {
 public:
  explicit SimStreamRef(SimStream* s) : s_(s) {}
  int ordinal() const override { return s_->ordinal(); }
  bool external() const override { return true; }
  uintptr_t handle() const override { return s_->handle(); }
  SimStream* target() const { return s_; }
  FutexBell* completion_bell() override { return s_->completion_bell(); }

 private:
  SimStream* s_;
};

// An event: how often it was recorded and how many of those markers the stream has passed.
struct SimEventState {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0, completed = 0;
  Status error;
};
class SimEvent final : public DeviceEvent {
 public:
  std::shared_ptr<SimEventState> st = std::make_shared<SimEventState>();
};

// The simulated stream behind `s` (its own, or the one a wrapped handle names), or nullptr.
inline SimStream* sim_stream_of(DeviceStream* s) {
  if (auto* r = dynamic_cast<SimStreamRef*>(s)) return r->target();
  return dynamic_cast<SimStream*>(s);
}

}  // namespace uccl
