// Communicator and Work: the public C++ API of uccl.
//
// A Communicator is a group of `size` ranks that run collectives together. Every operation is
// asynchronous: it returns a Work at once, and operations on one communicator complete in the
// order they were issued (the same order on every rank is the caller's contract; the Envelope
// on every message detects when it is broken and fails with kMismatch naming what differed).
//
// Progress: Work::wait() drives the engine from the calling thread (lowest latency: no thread
// hand-off). A background progress thread drives it only while operations are pending and
// nobody waits, so asynchronous work (torch futures, overlapping compute) still completes.
//
// Buffers must stay valid and unchanged until the Work completes. Counts are in elements,
// displacements in elements. send == recv means in place where the collective allows it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "uccl/store.h"
#include "uccl/types.h"
#include "uccl/status.h"

namespace uccl {

// Values travel in the Envelope: append only.
enum class Collective : uint8_t {
  kAllReduce = 0,
  kAllGather = 1,
  kReduceScatter = 2,
  kBroadcast = 3,
  kReduce = 4,
  kAllToAll = 5,
  kGather = 6,
  kScatter = 7,
  kSendRecv = 8,  // a batch of point-to-point sends and receives
  kBarrier = 9,
  kAllGatherV = 10,
  kReduceScatterV = 11,
  kAllToAllV = 12,
};
const char* collective_name(Collective c);

struct AllReduceArgs {
  const void* send = nullptr;
  void* recv = nullptr;  // may equal send
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  RedOp op = RedOp::kSum;
  double scalar = 1.0;  // premul_sum factor
};
struct ReduceArgs : AllReduceArgs {
  int root = 0;  // recv is only written (and may be null) off the root
};
struct BroadcastArgs {
  const void* send = nullptr;  // read on the root only
  void* recv = nullptr;        // written on every rank (root too, unless recv == send)
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  int root = 0;
};
struct AllGatherArgs {
  const void* send = nullptr;  // count elements; may equal recv + rank*count (in place)
  void* recv = nullptr;        // size * count elements
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
};
struct AllGatherVArgs {
  const void* send = nullptr;  // recv_counts[rank] elements
  void* recv = nullptr;
  std::vector<size_t> recv_counts;  // one per rank
  std::vector<size_t> recv_displs;  // one per rank (empty = packed)
  DataType dtype = DataType::kFloat32;
};
struct ReduceScatterArgs {
  const void* send = nullptr;  // size * count elements
  void* recv = nullptr;        // count elements; may equal send + rank*count (in place)
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  RedOp op = RedOp::kSum;
  double scalar = 1.0;
};
struct ReduceScatterVArgs {
  const void* send = nullptr;  // sum(recv_counts) elements, rank blocks packed in rank order
  void* recv = nullptr;        // recv_counts[rank] elements
  std::vector<size_t> recv_counts;
  DataType dtype = DataType::kFloat32;
  RedOp op = RedOp::kSum;
  double scalar = 1.0;
};
struct AllToAllArgs {
  const void* send = nullptr;  // size * count elements, block j goes to rank j
  void* recv = nullptr;        // size * count elements, block j came from rank j
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
};
struct AllToAllVArgs {
  const void* send = nullptr;
  void* recv = nullptr;
  std::vector<size_t> send_counts, send_displs, recv_counts, recv_displs;  // one per rank
  DataType dtype = DataType::kFloat32;
};
struct GatherArgs {
  const void* send = nullptr;  // count elements
  void* recv = nullptr;        // size * count elements on the root
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  int root = 0;
};
struct ScatterArgs {
  const void* send = nullptr;  // size * count elements on the root
  void* recv = nullptr;        // count elements
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  int root = 0;
};
// One point-to-point operation of a batch (torch's batch_isend_irecv, or a single send/recv).
struct P2POp {
  bool is_send = true;
  void* buf = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  int peer = 0;
  uint32_t tag = 0;  // p2p ops to one peer match in order; the tag must then be equal too
};

// Bytes moved by one operation, split by transport kind (issue: where did the bytes go).
struct OpStats {
  uint64_t bytes_sent_by_transport[4] = {0, 0, 0, 0};  // indexed by TransportKind
  uint64_t bytes_received_by_transport[4] = {0, 0, 0, 0};
  // The same bytes split by topology level of the peer: 0 same host, 1 same cluster, 2 other
  // cluster (topology/topology.h), so tests can check what crossed the slow links.
  uint64_t bytes_sent_by_level[3] = {0, 0, 0};
  uint64_t bytes_received_by_level[3] = {0, 0, 0};
  std::string algorithm;
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
};
using WorkPtr = std::shared_ptr<Work>;

struct CommOptions {
  double timeout_s = -1;       // < 0: UCCL_TIMEOUT_S
  std::string transport;       // "", "auto", "tcp", "shm" (and later "verbs"): overrides UCCL_TRANSPORT
  std::string algorithm;       // "", "auto", "ring", "direct", ...: overrides UCCL_ALGO
  std::string socket_ifname;   // overrides UCCL_SOCKET_IFNAME for this communicator
  std::string name;            // shown in logs
};

class Communicator {
 public:
  // Collective over `store`: every rank calls it with the same size and store. Publishes this
  // rank's PeerInfo and returns once the job secret is known; connections are made lazily on
  // first use (lower rank connects), so init never serializes on rank 0.
  static Result<std::shared_ptr<Communicator>> create(int rank, int size, std::shared_ptr<Store> store,
                                                      const CommOptions& opts = {});
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  virtual Result<WorkPtr> all_reduce(const AllReduceArgs& a) = 0;
  virtual Result<WorkPtr> reduce(const ReduceArgs& a) = 0;
  virtual Result<WorkPtr> broadcast(const BroadcastArgs& a) = 0;
  virtual Result<WorkPtr> all_gather(const AllGatherArgs& a) = 0;
  virtual Result<WorkPtr> all_gather_v(const AllGatherVArgs& a) = 0;
  virtual Result<WorkPtr> reduce_scatter(const ReduceScatterArgs& a) = 0;
  virtual Result<WorkPtr> reduce_scatter_v(const ReduceScatterVArgs& a) = 0;
  virtual Result<WorkPtr> all_to_all(const AllToAllArgs& a) = 0;
  virtual Result<WorkPtr> all_to_all_v(const AllToAllVArgs& a) = 0;
  virtual Result<WorkPtr> gather(const GatherArgs& a) = 0;
  virtual Result<WorkPtr> scatter(const ScatterArgs& a) = 0;
  virtual Result<WorkPtr> p2p(const std::vector<P2POp>& ops) = 0;
  virtual Result<WorkPtr> barrier() = 0;

  // Collective over this communicator: ranks with the same color form a new communicator,
  // ordered by (key, old rank). color < 0 returns nullptr (the rank joins no group).
  virtual Result<std::shared_ptr<Communicator>> split(int color, int key, const CommOptions& opts = {}) = 0;
  // Every rank of this communicator calls it with the same list; ranks not in it get nullptr.
  virtual Result<std::shared_ptr<Communicator>> new_group(const std::vector<int>& ranks,
                                                          const CommOptions& opts = {}) = 0;

  // Progress hint for a thread that issues operations and then waits for them itself (a
  // blocking call, a benchmark loop). While the returned token is alive, issuing does not wake
  // the background progress thread: that wake-up costs a futex call and a context switch, and
  // the woken thread then competes with the soon-waiting caller for the engine lock and the
  // cores (several microseconds per small operation on a 2-core host). The holder promises to
  // wait (Work::wait) for what it issued; until it does, nothing else drives those operations.
  // Dropping the token wakes the progress thread if operations are still pending. Nests;
  // thread safe. The default (for other implementations) is a no-op token.
  virtual std::shared_ptr<void> will_wait() { return nullptr; }

  // Fails every pending operation with kAborted and refuses new ones. Thread safe.
  virtual void abort(const std::string& why = "abort() called") = 0;
  // The first error that failed the communicator (Ok if none). Once failed, new ops fail with it.
  virtual Status error() = 0;
  // Levels, peers and the transport chosen per peer, for logs and comm.describe().
  virtual std::string describe() = 0;
  virtual std::shared_ptr<Store> store() = 0;
};
using CommPtr = std::shared_ptr<Communicator>;

}  // namespace uccl
