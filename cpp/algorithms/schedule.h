// Schedules: how an algorithm is written down, and the state machine that executes it.
//
// An algorithm does not loop or block. It builds a Schedule: a list of phases, each a set of
// actions. Local actions (copy, reduce, scale) of a phase run first, then all its sends and
// receives are posted together; the phase is over when they all completed. Phases run in
// order. A send may carry a local copy of its payload (send_tee). The executor (ScheduleTask)
// is advanced by progress() from whichever thread drives the communicator, so an operation is
// an explicit state machine as the design asks.
//
// Pipelining inside a phase comes from the transports: a large message is streamed (shm ring
// pieces, tcp socket chunks) and a reducing receive combines each piece as it lands, so a ring
// step overlaps sending, receiving and reducing without the schedule splitting it.
#pragma once

#include <bitset>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/select.h"
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
  void* tee = nullptr;         // kSend: also copy the payload here (SendRequest::tee)
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
  // Empties the schedule for another operation; phases and their action lists keep their
  // capacity, so rebuilding a schedule of the same shape allocates nothing.
  void reset(DataType dtype, RedOp op);
  void new_phase();
  void send(int peer, const void* src, size_t bytes);
  // A send whose payload is also copied to `tee` on this rank before the phase ends; the
  // transport may interleave the copy with sending (shm: chunk by chunk, read from cache once).
  // Nothing else in the phase may read or write `tee`.
  void send_tee(int peer, const void* src, size_t bytes, void* tee);
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
  size_t num_phases() const { return used_; }
  Phase& phase(size_t i) { return phases_[i]; }
  const Phase& phase(size_t i) const { return phases_[i]; }

 private:
  Action& add(Action::Kind kind, int peer, void* dst, const void* src, const void* src2, size_t bytes);
  DataType dtype_;
  RedOp op_;
  std::vector<Phase> phases_;  // [0, used_) belong to the current operation
  size_t used_ = 0;
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

// Where the executing operation works: owned by the communicator and reused by one operation
// after the other (only the operation at the head of the queue executes). The schedule, the
// requests handed to the transports and the per-peer step counters keep their capacity from
// call to call, so a small collective allocates almost nothing (8-byte all_reduce: ~10 fewer
// allocations per call).
struct ExecState {
  Schedule sched{DataType::kUint8, RedOp::kSum};
  std::vector<SendRequest> sends;
  std::vector<RecvRequest> recvs;
  std::vector<uint32_t> send_steps, recv_steps;  // per-peer message counters (Envelope.step)
  SelectionMemo choices;            // the algorithm chosen per (collective, size), see select.h
  std::bitset<256> logged_choices;  // (collective, algorithm) pairs whose choice was INFO-logged
};

// What an executing operation needs from its communicator.
struct OpEnv {
  int rank = 0;
  int size = 1;
  Envelope envelope;          // op_seq, coll, count, dtype, redop, root of this operation
  ConnectionManager* conns = nullptr;
  ScratchArena* scratch = nullptr;
  ExecState* exec = nullptr;  // the communicator's (required)
  OpStats* stats = nullptr;
  Algorithm algo = Algorithm::kAuto;  // forced by UCCL_ALGO / the communicator's algorithm option
  std::shared_ptr<const Topology> topo;  // set for collectives whose choice reads it (needs_topology)
  size_t small_msg_bytes = 0;
};

class ScheduleTask {
 public:
  // `build` fills the schedule when the operation starts executing (not when issued), so that
  // scratch memory is only claimed by the one operation running.
  using Builder = std::function<Status(const OpEnv&, Schedule*)>;
  ScheduleTask(OpEnv env, DataType dtype, RedOp op, Builder build)
      : env_(std::move(env)), dtype_(dtype), op_(op), build_(std::move(build)) {}

  // Advances the operation; never blocks. Sets *done when finished.
  Status progress(bool* done);
  // What the operation is waiting for (for timeout messages).
  std::string waiting_for() const;
  OpEnv& env() { return env_; }

 private:
  Status start_phase(bool* ready);
  // Adds a posted message's bytes to the operation's statistics (by transport and by level).
  void count_traffic(const Endpoint& ep, const Action& a, uint64_t* by_transport, uint64_t* by_level);
  OpEnv env_;
  DataType dtype_;
  RedOp op_;
  Builder build_;
  ExecState* x_ = nullptr;  // env_.exec, once the operation starts executing
  bool built_ = false;
  size_t phase_ = 0;
  bool posted_ = false;
};

}  // namespace uccl
