// Schedules: how an algorithm is written down, and the state machine that executes it.
//
// An algorithm does not loop or block. It builds a Schedule: a list of phases, each a set of
// actions. Local actions (copy, reduce, scale) of a phase run first, then all its sends and
// receives are posted together; the phase is over when they all completed. Phases run in
// order. The executor (ScheduleTask) is advanced by progress() from whichever thread drives
// the communicator, so an operation is an explicit state machine as the design asks.
//
// Pipelining inside a phase comes from the transports: a large message is streamed (shm ring
// pieces, tcp socket chunks) and a reducing receive combines each piece as it lands, so a ring
// step overlaps sending, receiving and reducing without the schedule splitting it.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/communicator.h"
#include "transports/transport.h"

namespace uccl {

class ConnectionManager;
class Topology;

struct Action {
  enum class Kind : uint8_t { kSend, kRecv, kRecvReduce, kCopy, kReduce, kScale, kDivide };
  Kind kind = Kind::kCopy;
  int peer = -1;
  void* dst = nullptr;
  const void* src = nullptr;   // send data / copy source / reduce lhs / scale source
  const void* src2 = nullptr;  // reduce rhs / reducing receive's accumulator (nullptr: dst)
  size_t bytes = 0;
  double factor = 1.0;         // kScale
  int divisor = 1;             // kDivide
  bool own_envelope = false;   // p2p messages carry their own per-peer envelope
  Envelope env;
  bool is_comm() const { return kind == Kind::kSend || kind == Kind::kRecv || kind == Kind::kRecvReduce; }
};

struct Phase {
  std::vector<Action> actions;
};

// Builder used by the algorithms: actions are appended to the last phase.
class Schedule {
 public:
  Schedule(DataType dtype, RedOp op) : dtype_(dtype), op_(op) {}
  void new_phase() { phases_.emplace_back(); }
  void send(int peer, const void* src, size_t bytes);
  void recv(int peer, void* dst, size_t bytes);
  // dst = op(acc, incoming); acc == nullptr means dst itself.
  void recv_reduce(int peer, void* dst, const void* acc, size_t bytes);
  void copy(void* dst, const void* src, size_t bytes);
  void reduce(void* dst, const void* a, const void* b, size_t bytes);
  void scale(void* dst, const void* src, size_t bytes, double factor);
  void divide(void* dst, const void* src, size_t bytes, int divisor);
  void p2p(const P2POp& op, const Envelope& env);

  DataType dtype() const { return dtype_; }
  RedOp op() const { return op_; }
  std::vector<Phase>& phases() { return phases_; }
  const std::vector<Phase>& phases() const { return phases_; }

 private:
  Action& add(Action a);
  Action& add(Action::Kind kind, int peer, void* dst, const void* src, const void* src2, size_t bytes);
  DataType dtype_;
  RedOp op_;
  std::vector<Phase> phases_;
};

// Grows on demand and is reused by every operation of a communicator: operations execute one
// at a time, and fresh large allocations would cost page faults on every call.
class ScratchArena {
 public:
  ~ScratchArena();
  void* get(size_t bytes);

 private:
  void* buf_ = nullptr;
  size_t cap_ = 0;
};

// What an executing operation needs from its communicator.
struct OpEnv {
  int rank = 0;
  int size = 1;
  Envelope envelope;          // op_seq, coll, count, dtype, redop, root of this operation
  ConnectionManager* conns = nullptr;
  ScratchArena* scratch = nullptr;
  OpStats* stats = nullptr;
  std::string algo_override;  // "", "auto", "ring", "direct", "hier"
  std::shared_ptr<const Topology> topo;  // set for collectives that may run hierarchically
  size_t small_msg_bytes = 0;
};

class ScheduleTask {
 public:
  // `build` fills the schedule when the operation starts executing (not when issued), so that
  // scratch memory is only claimed by the one operation running.
  using Builder = std::function<Status(const OpEnv&, Schedule*)>;
  ScheduleTask(OpEnv env, DataType dtype, RedOp op, Builder build)
      : env_(std::move(env)), sched_(dtype, op), build_(std::move(build)) {}

  // Advances the operation; never blocks. Sets *done when finished.
  Status progress(bool* done);
  // What the operation is waiting for (for timeout messages).
  std::string waiting_for() const;
  OpEnv& env() { return env_; }

 private:
  Status start_phase(bool* ready);
  OpEnv env_;
  Schedule sched_;
  Builder build_;
  bool built_ = false;
  size_t phase_ = 0;
  bool posted_ = false;
  std::vector<SendRequest> sends_;
  std::vector<RecvRequest> recvs_;
  std::vector<uint32_t> send_steps_, recv_steps_;  // per-peer message counters (Envelope.step)
};

}  // namespace uccl
