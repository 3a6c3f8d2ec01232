// An operation's Work (see engine.h): its completion, status and stats, callbacks, and the
// device streams made to wait for it (wait_stream). Driven by the Engine, which finishes it.
#include "core/engine.h"

namespace uccl {

std::string OpWork::label() const { return std::string(collective_name(coll_)) + " #" + std::to_string(seq_); }

Status OpWork::wait(double timeout_s) { return engine_->wait(this, timeout_s); }

bool OpWork::is_completed() {
  if (!done()) engine_->poll_once();
  return done();
}

Status OpWork::status() {
  if (!done()) return Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

OpStats OpWork::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void OpWork::on_complete(std::function<void(const Status&)> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done()) {
      callbacks_.push_back(std::move(fn));
      return;
    }
  }
  fn(status());
}

Status OpWork::wait_stream(uintptr_t stream) {
  if (!mem.is_device())
    return InvalidArgument(label() + ": wait_stream is for operations on device buffers (this one's are host memory)");
  auto st = mem.backend->wrap_stream(mem.ordinal, stream);
  if (!st.ok()) return st.status().with_context(label() + ": wait_stream");
  UCCL_RETURN_IF_ERROR(refuse_capture(mem.backend, st.value().get(), label() + ": wait_stream"));
  // Where a signal wait could deadlock the device runtime (device.h, signal_waits_safe) or hold
  // another communicator's operations (stream_wait_for), the host waits: once the operation is
  // done its results are in place for every stream.
  const StreamWaitMode how = stream_wait_for(mem.backend, engine_->owns_signal_waits(), nullptr);
  if (how == StreamWaitMode::kHost) return wait(-1.0);
  auto sig = mem.backend->create_signal(mem.ordinal);
  if (!sig.ok()) return sig.status().with_context(label() + ": wait_stream");
  UCCL_RETURN_IF_ERROR(mem.backend->stream_wait_signal(st.value().get(), sig.value(), how));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done()) {
      signals_.push_back(sig.value());  // raised by finish(), failed too: the stream must not hang
      return Status::Ok();
    }
  }
  sig.value()->raise();
  return Status::Ok();
}

void OpWork::finish(const Status& s, std::vector<std::function<void()>>* deferred) {
  std::lock_guard<std::mutex> lock(mu_);
  if (done()) return;
  status_ = s;
  state_.store(1, std::memory_order_release);
  for (auto& sig : signals_) sig->raise();
  signals_.clear();
  for (auto& cb : callbacks_) deferred->push_back([cb, s] { cb(s); });
  callbacks_.clear();
}

std::string InlineOp::label() const { return std::string(collective_name(coll)) + " #" + std::to_string(seq); }

}  // namespace uccl
