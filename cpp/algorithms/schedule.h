// Schedules: how an algorithm is written down. Pure data: building one needs no connection.
//
// An algorithm does not loop or block. It builds a Schedule: a list of phases, each a set of
// actions. Local actions (copy, reduce, scale) of a phase run first, then all its sends and
// receives are posted together; the phase is over when they all completed. Phases run in
// order (a device operation's next phase of messages only may be posted while this one runs,
// where their buffers allow: ScheduleTask::post_ahead; builders need not know). A send may
// carry a local copy of its payload (send_tee). The executor
// (core/schedule_executor.h, ScheduleTask) is advanced by progress() from whichever thread
// drives the communicator, so an operation is an explicit state machine as the design asks;
// this floor only describes what to do, so schedules are unit tested without any connection.
//
// Pipelining inside a phase comes from the transports: a large message is streamed (shm ring
// pieces, tcp socket chunks) and a reducing receive combines each piece as it lands, so a ring
// step overlaps sending, receiving and reducing without the schedule splitting it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/select.h"
#include "base/config.h"
#include "base/device.h"
#include "transports/transport.h"
#include "uccl/args.h"
#include "uccl/work.h"

namespace uccl {

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
  // kRecv: the bytes land in the output and no later local action of this operation reads
  // them (all_gather's blocks, broadcast's); kSend: the peer receives this message that way.
  // A hint for the transport (RecvRequest::final, SendRequest::to_final): shm lets the sender
  // write such a message of an exchange step straight into the receive from a smaller size.
  // Builders set it on both ends of a message (schedules are symmetric); a disagreement only
  // costs the hint.
  bool final_data = false;
  // kRecvReduce: the phase's ordered receives all reduce into the same bytes, one after another
  // in action order, range by range (the executor chains them: RecvRequest::after). So the
  // result is the same every run whichever peer's data arrives first, and where the transport
  // takes turns (shm) each range is combined from every peer while it is in cache. The first
  // one folds its accumulator in, the others accumulate into dst.
  bool ordered = false;
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
  // send, send_tee and recv return the action for setting its hints (valid until the next add).
  Action& send(int peer, const void* src, size_t bytes);
  // A send whose payload is also copied to `tee` on this rank before the phase ends; the
  // transport may interleave the copy with sending (shm: chunk by chunk, read from cache once).
  // Nothing else in the phase may read or write `tee`.
  Action& send_tee(int peer, const void* src, size_t bytes, void* tee);
  Action& recv(int peer, void* dst, size_t bytes);
  // dst = op(acc, incoming); acc == nullptr means dst itself. Returns the action (hints).
  Action& recv_reduce(int peer, void* dst, const void* acc, size_t bytes);
  void copy(void* dst, const void* src, size_t bytes);
  void reduce(void* dst, const void* a, const void* b, size_t bytes);
  void scale(void* dst, const void* src, size_t bytes, double factor);
  void divide(void* dst, const void* src, size_t bytes, int divisor);
  void p2p(const P2POp& op, const Envelope& env);
  // Appends independent schedules as a software pipeline (a wavefront): phase p of what is
  // appended holds phase p - i of parts[i] for every i, so part i+1's first phases run while
  // part i is in its later ones (one operation cut into segments: segment i crosses the slow
  // level while segment i+1 still runs the fast ones). Parts must not touch each other's
  // memory; the messages of one phase to one peer are posted in part order on both ends.
  void append_wavefront(const std::vector<Schedule>& parts);

  DataType dtype() const { return dtype_; }
  RedOp op() const { return op_; }
  // The algorithm the schedule runs (choose_algorithm sets it): its messages' envelopes carry it.
  Algorithm algorithm() const { return algorithm_; }
  void set_algorithm(Algorithm a) { algorithm_ = a; }
  size_t num_phases() const { return used_; }
  Phase& phase(size_t i) { return phases_[i]; }
  const Phase& phase(size_t i) const { return phases_[i]; }

 private:
  Action& add(Action::Kind kind, int peer, void* dst, const void* src, const void* src2, size_t bytes);
  DataType dtype_;
  RedOp op_;
  Algorithm algorithm_ = Algorithm::kAuto;
  std::vector<Phase> phases_;  // [0, used_) belong to the current operation
  size_t used_ = 0;
};

// Grows on demand and is reused by every operation of a communicator: operations execute one
// at a time, and fresh large allocations would cost page faults on every call.
// A device operation's arena hands out memory of its device (set_device() by the executor when
// the operation starts), so that its local actions run on the device with the device's kernels.
class ScratchArena {
 public:
  ~ScratchArena();
  void* get(size_t bytes);  // nullptr when a device allocation failed (error() says why)
  void set_device(DeviceBackend* backend, int ordinal);
  const Status& error() const { return error_; }

 private:
  void release();
  void* buf_ = nullptr;
  size_t cap_ = 0;
  DeviceBackend* dev_ = nullptr;
  int ordinal_ = -1;
  Status error_;
};

// UCCL_ALGO and UCCL_SMALL_MSG_BYTES (the communicator's options may override the first).
extern const TextSetting kAlgo;
extern const BytesSetting kSmallMsgBytes;

// What a schedule builder knows about the operation and its communicator.
struct OpEnv {
  int rank = 0;
  int size = 1;
  Envelope envelope;          // op_seq, coll, count, dtype, redop, root of this operation
  ScratchArena* scratch = nullptr;
  OpStats* stats = nullptr;
  SelectionState* choices = nullptr;  // the communicator's memo of choices (select.h), optional
  Algorithm algo = Algorithm::kAuto;  // forced by UCCL_ALGO / the communicator's algorithm option
  std::shared_ptr<const Topology> topo;  // set for collectives whose choice reads it (needs_topology)
  size_t small_msg_bytes = 0;
  size_t hier_segment_bytes = SIZE_MAX;  // SIZE_MAX: UCCL_HIER_SEGMENT_BYTES (hierarchical.cc); tests set it
  MemoryLoc mem;         // where the call's buffers live (host, or one device)
  uintptr_t stream = 0;  // device: the user's stream the operation is ordered after (0: default)
  // Device: an event recorded on that stream when the call was made (in the caller's thread),
  // so that what the caller queues there afterwards (a Work::wait_stream on this very
  // operation) never comes before it.
  std::shared_ptr<DeviceEvent> user_ready;
};

}  // namespace uccl
