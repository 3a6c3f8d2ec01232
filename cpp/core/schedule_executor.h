// The schedule executor: runs the Schedule an algorithm built (algorithms/schedule.h) over the
// communicator's connections.
//
// Why here and not beside the builders: executing needs endpoints (the connection manager),
// building does not. Keeping the executor in core leaves cpp/algorithms pure data, so every
// schedule is unit tested without a connection. A ScheduleTask is an explicit state machine:
// progress() never blocks; it posts a phase's messages once every peer of the phase is
// connected and moves on when they all completed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/schedule.h"
#include "transports/transport.h"

namespace uccl {

class ConnectionManager;

// Where the executing operation works: owned by the communicator and reused by one operation
// after the other (only the operation at the head of the queue executes). The schedule, the
// requests handed to the transports and the per-peer step counters keep their capacity from
// call to call, so a small collective allocates almost nothing (8-byte all_reduce: ~10 fewer
// allocations per call).
struct ExecState {
  Schedule sched{DataType::kUint8, RedOp::kSum};
  std::vector<SendRequest> sends;  // the posted phase's are the first nsends (the vectors only grow)
  std::vector<RecvRequest> recvs;
  size_t nsends = 0, nrecvs = 0;
  // A phase's ordered receives (Action::ordered) in schedule order: receive `index` goes after
  // receive `before` (RecvRequest::after).
  struct Turn {
    size_t index, before;
    int peer;
  };
  std::vector<Turn> chain;
  // Where their endpoints cannot take turns they are posted one at a time, each once the one
  // before it completed: chain[held_next..] wait (held_next == chain.size(): none waits).
  size_t held_next = 0;
  std::vector<uint32_t> send_steps, recv_steps;  // per-peer message counters (Envelope.step)
  // Posting ahead (a device operation; ScheduleTask::post_ahead): the next phase's requests,
  // posted while the current phase runs, swapped with sends / recvs when it becomes current.
  std::vector<SendRequest> ahead_sends;
  std::vector<RecvRequest> ahead_recvs;
  size_t ahead_nsends = 0, ahead_nrecvs = 0;
  // Device operations: the stream their local actions run on and the events the executor
  // queries (never waits on), for the device of the last device operation.
  DeviceBackend* dev = nullptr;
  int dev_ordinal = -1;
  std::unique_ptr<DeviceStream> stream;
  std::unique_ptr<DeviceEvent> locals_done;
  ~ExecState() {
    if (dev && stream) dev->synchronize(stream.get());
  }
  // p2p messages per peer (Envelope.op_seq of kSendRecv), numbered when posted: execution
  // follows issue order, and an any-source receive learns its peer only when it matches.
  std::vector<uint64_t> p2p_sent, p2p_recvd;
  int any_source_next = 0;  // where the next any-source receive starts looking (fairness)
  // The task whose schedule `sched` holds (ScheduleTask::restart reuses it while it does).
  const void* built_by = nullptr;
};

class ScheduleTask {
 public:
  // `build` fills the schedule when the operation starts executing (not when issued), so that
  // scratch memory is only claimed by the one operation running.
  using Builder = std::function<Status(const OpEnv&, Schedule*)>;
  // `conns` and `exec` belong to the communicator and outlive the task.
  ScheduleTask(OpEnv env, ConnectionManager* conns, ExecState* exec, DataType dtype, RedOp op, Builder build)
      : env_(std::move(env)), conns_(conns), exec_(exec), dtype_(dtype), op_(op), build_(std::move(build)) {}

  // Advances the operation; never blocks. Sets *done when finished.
  Status progress(bool* done);
  // Makes a finished (host memory) task run again as operation `op_seq` with the same
  // arguments: the express path's cached schedule (core/express.cc). The schedule is rebuilt
  // only if another operation's schedule replaced it in the ExecState meanwhile.
  void restart(uint64_t op_seq);
  // What the operation is waiting for (for timeout messages).
  std::string waiting_for() const;
  // After restart(): whether this run executes from the tiny plan (core/schedule_tiny.cc),
  // made now if it can be. An express task of host memory whose messages are all small
  // (kTinyBytes), built, every peer connected, gets one: a flat list of each phase's local
  // actions and ready-made requests, whose progress() polls only its own endpoints. The
  // messages, their order and the results are the schedule's.
  bool tiny_ready();
  OpEnv& env() { return env_; }

 private:
  Status start_phase(bool* ready);
  void run_local(const Action& a);  // a host local action (copy, reduce, scale, divide)
  // The tiny plan (core/schedule_tiny.cc).
  struct TinyPlan {
    struct Phase {
      size_t locals_end, sends_end, recvs_end;  // each phase's items end where the next's begin
    };
    bool valid = false;
    std::vector<Phase> phases;
    std::vector<Action> locals;
    std::vector<SendRequest> sends;
    std::vector<RecvRequest> recvs;
    std::vector<Endpoint*> send_eps, recv_eps;
    std::vector<std::pair<int, Endpoint*>> peers;  // each peer's endpoint when the plan was made
  };
  bool make_tiny_plan();
  Status progress_tiny(bool* done);
  std::string tiny_waiting_for() const;
  // Device operations (env_.mem is a device): local actions are queued on the device with its
  // kernels (a send's tee becomes a device copy), and the phase's messages are posted on staged
  // endpoints only once the executor's event says the local actions completed (at once when
  // the phase has none: *queued says whether anything went to the device).
  Status prepare_device();
  Status run_locals_on_device(const Phase& ph, bool* queued);
  // The peer's endpoint for this operation (behind a staged endpoint for device memory);
  // nullptr while still connecting. comm_endpoint: the same once every peer is connected.
  Result<Endpoint*> endpoint_for(int peer);
  Endpoint* comm_endpoint(int peer);
  // `fed` / `guards` (posting ahead): per send / receive of the phase, in action order, its
  // SendRequest::fed_by / RecvRequest::guard (nullptr: none); given, the phase is posted into
  // ExecState::ahead_* and the current phase's chain of ordered receives is left alone.
  void post_messages(const Phase& ph, size_t nsend, size_t nrecv, size_t recv_bytes,
                     const std::vector<const RecvRequest*>* fed = nullptr,
                     const std::vector<const SendRequest*>* guards = nullptr);
  // Posting ahead (UCCL_POST_AHEAD): a device operation posts the next phase's messages with
  // the current one's when the next phase is messages only and its buffers meet the current
  // phase's only as a send of what a current receive delivers (fed_by: read chunk by chunk as
  // it lands) or a receive into what a current send reads (guard: written chunk by chunk once
  // read), on endpoints that feed (Endpoint::feeds: staged, split). So a ring's next step starts
  // on the first chunk of this one (NCCL's recvReduceSend / recvCopySend in one loop) instead
  // of after its last, and the bounce slots drain while they fill. Messages of each peer and
  // direction keep their order: the next phase's go behind the current one's, numbered alike.
  void post_ahead();
  void fill_recv(const Action& a, RecvRequest* r);
  // The requests of a comm action with its envelope (post_messages and the tiny plan).
  void recv_request(const Action& a, const Envelope& expect, RecvRequest* r) const;
  static void send_request(const Action& a, const Envelope& env, size_t recv_bytes, SendRequest* s);
  void post_held();  // the held ordered receives whose turn came
  // Chooses the peer of an any-source receive (a.peer == kAnySource): the first peer, in turn,
  // whose next message is a p2p message with the receive's tag. *matched stays false while
  // none has arrived; a failed peer (or connection) fails the receive.
  Status match_any_source(Action& a, bool* matched);
  // Adds a posted message's bytes to the operation's statistics (by transport and by level).
  void count_traffic(const Endpoint& ep, const Action& a, uint64_t* by_transport, uint64_t* by_level);
  OpEnv env_;
  ConnectionManager* conns_;
  ExecState* exec_;
  DataType dtype_;
  RedOp op_;
  Builder build_;
  ExecState* x_ = nullptr;  // exec_, once the operation starts executing
  bool built_ = false;
  size_t phase_ = 0;
  bool posted_ = false;
  bool device_ = false;          // env_.mem is a device
  bool user_ready_ = true;       // the user's stream reached the operation
  bool locals_queued_ = false;   // this phase's local actions are on the device
  bool locals_pending_ = false;  // ... and there were some (their event to query)
  bool ahead_ = false;           // phase_ + 1 is posted (ExecState::ahead_*)
  TinyPlan tiny_;
  bool tiny_run_ = false;        // this run executes from tiny_
};

}  // namespace uccl
