// Work: the handle of one asynchronous operation, and what it reports (OpStats).
//
// Public (include/uccl). A Work is returned at once by every operation of a Communicator;
// wait() drives progress from the calling thread and returns the operation's Status.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "uccl/status.h"
#include "uccl/types.h"

namespace uccl {

// How many transports one process can tell apart (ids of the transport table are below it).
constexpr int kMaxTransports = 8;

// Bytes moved by one operation, split by transport kind (issue: where did the bytes go).
struct OpStats {
  // Indexed by the transport's id (its entry in the transport table names it).
  uint64_t bytes_sent_by_transport[kMaxTransports] = {};
  uint64_t bytes_received_by_transport[kMaxTransports] = {};
  // The same bytes split by topology level of the peer: 0 same host, 1 same cluster, 2 other
  // cluster (topology/topology.h), so tests can check what crossed the slow links.
  uint64_t bytes_sent_by_level[3] = {0, 0, 0};
  uint64_t bytes_received_by_level[3] = {0, 0, 0};
  std::string algorithm;
  // An any-source receive (P2POp::peer == kAnySource): the rank it took its message from,
  // once the work is done; -1 for every other operation.
  int source = -1;
  // Phases of a device operation posted while the phase before them still ran (UCCL_POST_AHEAD:
  // a ring's next step fed chunk by chunk from this one's receive); 0 for host memory.
  int phases_ahead = 0;
};

class Work {
 public:
  virtual ~Work() = default;
  // Waits until the operation finished; timeout_s < 0 means the communicator's default
  // (UCCL_TIMEOUT_S). Drives progress from the calling thread. On timeout the communicator
  // is marked failed (the peers may be stuck in the middle of the same operation).
  virtual Status wait(double timeout_s = -1) = 0;
  virtual bool is_completed() = 0;  // non-blocking
  virtual Status status() = 0;      // Ok while pending or done, the error once failed
  virtual uint64_t seq() const = 0;
  virtual Collective collective() const = 0;
  virtual OpStats stats() = 0;
  // Runs fn once when the work finishes (at once if it already has), on the thread that
  // completed it. fn must not block or call back into the communicator.
  virtual void on_complete(std::function<void(const Status&)> fn) = 0;
  // Operations on device buffers: work enqueued on `stream` (a native stream handle of the
  // operation's device; 0 its default stream) after this call runs only once the operation
  // finished, and the calling thread does not wait (NCCL's work.wait() on a CUDA stream). On a
  // failure the stream is released as well (it must never hang): the error still comes from
  // wait()/status(). kInvalidArgument for an operation on host memory, kNotSupported where the
  // device's backend cannot make a stream wait for the host.
  virtual Status wait_stream(uintptr_t /*stream*/) { return NotSupported("this Work cannot make a stream wait"); }
};
using WorkPtr = std::shared_ptr<Work>;

}  // namespace uccl
