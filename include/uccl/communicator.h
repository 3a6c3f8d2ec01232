// Communicator: the public C++ API of uccl (the one header an embedder includes; it brings
// args.h, work.h, options.h, status.h and store.h along).
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

#include "uccl/args.h"
#include "uccl/options.h"
#include "uccl/status.h"
#include "uccl/store.h"
#include "uccl/work.h"

namespace uccl {

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

  // A barrier that names who did not come (Gloo's monitoredBarrier): rank 0 takes every other
  // rank's arrival as it comes (p2p of the barrier's own tag, from any source) until timeout_s
  // (< 0: the communicator's timeout), then answers them all. On rank 0, a rank that did not
  // arrive in time is kTimeout (a rank that died: kRemoteError) with peer = the lowest such rank,
  // the message naming it (all of them with wait_all_ranks); *missing (if given) gets them all.
  // The others wait up to twice timeout_s for rank 0's answer (it decides within timeout_s from
  // its own start, which may be later) and fail with peer 0. A timeout fails the communicator, as
  // any operation's does. No p2p of the caller's may be in flight. timeout_s == 0 on rank 0 is
  // kTimeout at once (nothing sent).
  virtual Status monitored_barrier(double timeout_s = -1, bool wait_all_ranks = false, std::vector<int>* missing = nullptr) {
    (void)timeout_s, (void)wait_all_ranks, (void)missing;
    return Status(Code::kNotSupported, "this communicator has no monitored barrier");
  }

  // Predicted seconds of a collective as this communicator would run it now: the algorithm its
  // selection picks (algorithms/select.h, UCCL_ALGO included) on the topology it picks with
  // (the probe's link rates once a collective has run the probe; declared, sysfs or default
  // rates before). Computed here alone: nothing runs, no message is sent, no peer is waited for
  // (PyTorch's _time_estimator, planners; uccl::Estimator adds these up for whole programs).
  // total_bytes is the cost model's D (topology/cost_model.h): the reduced vector (all_reduce,
  // reduce, reduce_scatter), the gathered output (all_gather, gather), the broadcast buffer,
  // scatter's whole input, one rank's send buffer of all_to_all; 0 for barrier. The model is
  // of host-memory paths: staging device memory through the host is not in it. kNotSupported
  // where no topology can be had (its fetch failed), kInvalidArgument for kSendRecv (use
  // estimate_p2p) or a root out of range.
  virtual Result<double> estimate(Collective coll, size_t total_bytes, int root = 0) {
    (void)coll, (void)total_bytes, (void)root;
    return Status(Code::kNotSupported, "this communicator cannot estimate");
  }
  // A batch of this rank's point-to-point ops, its messages running at once. A receive from
  // any source is counted as coming from the nearest other rank (its peer is not known yet).
  virtual Result<double> estimate_p2p(const std::vector<P2POp>& ops) {
    (void)ops;
    return Status(Code::kNotSupported, "this communicator cannot estimate");
  }

  // Blocking forms: issue and wait in the calling thread, like MPI_Allreduce or a C call with
  // a NULL request (timeout_s < 0: the communicator's timeout). The default issues the
  // operation and waits for its Work. The library's own communicators run an operation that
  // finds the communicator idle (nothing queued or running) and its buffers in host memory on
  // the express path: no Work, no queue entry, and the schedule built for the same call
  // (arguments and buffers) the time before is run again instead of being rebuilt (issue 18:
  // an 8-byte all_reduce spent most of its time in that machinery, not on the wire). Results
  // and messages are exactly those of the asynchronous call.
  virtual Status run(const AllReduceArgs& a, double timeout_s = -1);
  virtual Status run(const ReduceArgs& a, double timeout_s = -1);
  virtual Status run(const BroadcastArgs& a, double timeout_s = -1);
  virtual Status run(const AllGatherArgs& a, double timeout_s = -1);
  virtual Status run(const ReduceScatterArgs& a, double timeout_s = -1);

  // Collective over this communicator: ranks with the same color form a new communicator,
  // ordered by (key, old rank). color < 0 returns nullptr (the rank joins no group).
  virtual Result<std::shared_ptr<Communicator>> split(int color, int key, const CommOptions& opts = {}) = 0;
  // Every rank of this communicator calls it with the same list; ranks not in it get nullptr.
  virtual Result<std::shared_ptr<Communicator>> new_group(const std::vector<int>& ranks,
                                                          const CommOptions& opts = {}) = 0;

  // Fault tolerance (collective over the survivors; protocol in cpp/core/agreement.h).
  // shrink(): the surviving ranks agree on which ranks failed (every survivor gets the same
  // answer, also when a rank, the coordinator included, fails during the agreement) and get a
  // new communicator of the survivors, ranks renumbered in their old order, over a fresh store
  // served by the new rank 0's process (so it works when the old store died with its rank).
  // This communicator is aborted first. A rank that the others excluded (it did not answer
  // within the timeout) gets kAborted; no agreement within a few timeouts is kTimeout. Needs
  // the peers' addresses: from the store, or cached by the first collective that read the
  // topology (when the store died before anything fetched them, shrink fails with its error).
  virtual Result<std::shared_ptr<Communicator>> shrink(const CommOptions& opts = {}) {
    (void)opts;
    return Status(Code::kNotSupported, "this communicator cannot shrink");
  }
  // shrink_excluding(): shrink() where the caller names the ranks to leave out (every survivor
  // passes the same list; torch.distributed.shrink_group's ranks_to_exclude, NCCL's
  // ncclCommShrink). They count as failed from the start: never asked, and they need not call
  // (they may be alive). The new communicator is exactly the others: when the agreement finds
  // another rank failed too, every survivor gets kRemoteError naming it and nothing is formed;
  // a second call whose list names it as well forms the communicator. kInvalidArgument for a
  // rank out of range, listed twice, or this rank itself.
  virtual Result<std::shared_ptr<Communicator>> shrink_excluding(const std::vector<int>& exclude,
                                                                 const CommOptions& opts = {}) {
    (void)exclude, (void)opts;
    return Status(Code::kNotSupported, "this communicator cannot shrink");
  }
  // grow(): every rank of this communicator calls it at the same step with the same new_size
  // (>= size()) and tag; new_size - size() processes call join() with the same tag on this
  // communicator's store. All get a new communicator of new_size ranks (the current ranks
  // keep theirs, joiners follow in the order they arrived). Library version, protocols, job
  // key mode and transport settings must match: otherwise every side gets kMismatch naming the
  // difference. A joiner too many gets kInvalidArgument; a missing one, kTimeout.
  virtual Result<std::shared_ptr<Communicator>> grow(int new_size, const std::string& tag,
                                                     const CommOptions& opts = {}) {
    (void)new_size, (void)tag, (void)opts;
    return Status(Code::kNotSupported, "this communicator cannot grow");
  }
  static Result<std::shared_ptr<Communicator>> join(std::shared_ptr<Store> store, const std::string& tag,
                                                    const CommOptions& opts = {});

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
