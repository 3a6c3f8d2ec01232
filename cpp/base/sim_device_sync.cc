// The simulated device's ordering (see sim_device.h): events recorded and queried, a stream
// waiting for an event or for a host-raised signal, graph capture marks, synchronization. Each
// is a task on the stream's worker (sim_stream.h), so it runs in the stream's order.
#include "base/sim_device.h"

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "base/sim_stream.h"

namespace uccl {

Result<std::unique_ptr<DeviceEvent>> SimBackend::create_event() {
  return std::unique_ptr<DeviceEvent>(std::make_unique<SimEvent>());
}

namespace {
// What record and stream_wait share: the simulated stream and event state behind s and e, and
// the event's generation (recording: a new one; waiting: the last one recorded).
Status stream_and_event(const std::string& name, DeviceStream* s, DeviceEvent* e, bool record, SimStream** st,
                        std::shared_ptr<SimEventState>* state, uint64_t* gen) {
  *st = sim_stream_of(s);
  auto* ev = dynamic_cast<SimEvent*>(e);
  if (!*st || !ev) return InvalidArgument(name + ": not a simulated stream / event");
  *state = ev->st;
  std::lock_guard<std::mutex> lock((*state)->mu);
  *gen = record ? ++(*state)->recorded : (*state)->recorded;
  return Status::Ok();
}
}  // namespace

Status SimBackend::record(DeviceEvent* e, DeviceStream* s) {
  SimStream* st;
  std::shared_ptr<SimEventState> state;
  uint64_t gen;
  UCCL_RETURN_IF_ERROR(stream_and_event(name_, s, e, true, &st, &state, &gen));
  st->enqueue([state, gen](const Status& sticky) {
    std::lock_guard<std::mutex> lock(state->mu);
    if (gen > state->completed) state->completed = gen;
    if (!sticky.ok() && state->error.ok()) state->error = sticky;
    state->cv.notify_all();
    return Status::Ok();
  });
  return Status::Ok();
}

Result<bool> SimBackend::query(DeviceEvent* e) {
  auto* ev = dynamic_cast<SimEvent*>(e);
  if (!ev) return InvalidArgument(name_ + ": not a simulated event");
  std::lock_guard<std::mutex> lock(ev->st->mu);
  if (!ev->st->error.ok()) return ev->st->error;
  return ev->st->completed >= ev->st->recorded;
}

Status SimBackend::stream_wait(DeviceStream* s, DeviceEvent* e) {
  SimStream* st;
  std::shared_ptr<SimEventState> state;
  uint64_t gen;
  UCCL_RETURN_IF_ERROR(stream_and_event(name_, s, e, false, &st, &state, &gen));
  st->enqueue([state, gen](const Status&) {
    std::unique_lock<std::mutex> lock(state->mu);
    state->cv.wait(lock, [&] { return state->completed >= gen; });
    return state->error;  // the waiting stream inherits the producer's failure
  });
  return Status::Ok();
}

namespace {
// The host raises it; a stream's worker waits for it (as a GPU polls mapped host memory).
class SimSignal final : public DeviceSignal {
 public:
  void raise() override {
    std::lock_guard<std::mutex> lock(mu);
    raised = true;
    cv.notify_all();
  }
  std::mutex mu;
  std::condition_variable cv;
  bool raised = false;
};
}  // namespace

Result<std::shared_ptr<DeviceSignal>> SimBackend::create_signal(int ordinal) {
  if (ordinal < 0 || ordinal >= devices_) return InvalidArgument(name_ + ": no device " + std::to_string(ordinal));
  return std::shared_ptr<DeviceSignal>(std::make_shared<SimSignal>());
}

Status SimBackend::stream_wait_signal(DeviceStream* s, const std::shared_ptr<DeviceSignal>& sig, StreamWaitMode) {
  SimStream* st = sim_stream_of(s);
  auto sim = std::dynamic_pointer_cast<SimSignal>(sig);
  if (!st || !sim) return InvalidArgument(name_ + ": not a simulated stream / signal");
  return mem_.enqueue_wait([&] {
    waits_outstanding_.fetch_add(1);
    st->enqueue([this, sim](const Status&) {  // the queue entry keeps the signal alive
      {
        std::unique_lock<std::mutex> lock(sim->mu);
        sim->cv.wait(lock, [&] { return sim->raised; });
      }
      waits_outstanding_.fetch_sub(1);
      return Status::Ok();
    });
    return Status::Ok();
  });
}

Result<bool> SimBackend::capturing(DeviceStream* s) {
  SimStream* st = sim_stream_of(s);
  if (!st) return InvalidArgument(name_ + ": not a simulated stream");
  return st->capturing.load();
}

Status SimBackend::set_capturing(DeviceStream* s, bool on) {
  SimStream* st = sim_stream_of(s);
  if (!st) return InvalidArgument(name_ + ": not a simulated stream");
  st->capturing.store(on);
  return Status::Ok();
}

Status SimBackend::synchronize(DeviceStream* s) {
  SimStream* st = sim_stream_of(s);
  if (!st) return InvalidArgument(name_ + ": not a simulated stream");
  return st->synchronize();
}

}  // namespace uccl
