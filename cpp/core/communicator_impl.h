// CommunicatorImpl: argument checking, sequence numbers, and turning each call into a
// ScheduleTask queued on the Engine. Sub-communicators (split/new_group) are new
// communicators over a prefixed view of the same store.
#pragma once

#include <atomic>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <vector>

#include "uccl/communicator.h"
#include "base/config.h"
#include "core/agreement.h"
#include "core/engine.h"
#include "topology/topology.h"

namespace uccl {

extern const BoolSetting kExpress;  // UCCL_EXPRESS (core/express.cc)

class CommunicatorImpl : public Communicator {
 public:
  CommunicatorImpl(int rank, int size, std::shared_ptr<Store> store, const CommOptions& opts,
                   std::shared_ptr<Engine> engine);
  ~CommunicatorImpl() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Result<WorkPtr> all_reduce(const AllReduceArgs& a) override;
  Result<WorkPtr> reduce(const ReduceArgs& a) override;
  Result<WorkPtr> broadcast(const BroadcastArgs& a) override;
  Result<WorkPtr> all_gather(const AllGatherArgs& a) override;
  Result<WorkPtr> all_gather_v(const AllGatherVArgs& a) override;
  Result<WorkPtr> reduce_scatter(const ReduceScatterArgs& a) override;
  Result<WorkPtr> reduce_scatter_v(const ReduceScatterVArgs& a) override;
  Result<WorkPtr> all_to_all(const AllToAllArgs& a) override;
  Result<WorkPtr> all_to_all_v(const AllToAllVArgs& a) override;
  Result<WorkPtr> gather(const GatherArgs& a) override;
  Result<WorkPtr> scatter(const ScatterArgs& a) override;
  Result<WorkPtr> p2p(const std::vector<P2POp>& ops) override;
  Result<WorkPtr> barrier() override;
  // core/estimate.cc
  Result<double> estimate(Collective coll, size_t total_bytes, int root) override;
  Result<double> estimate_p2p(const std::vector<P2POp>& ops) override;
  // The blocking forms, with the express path (core/express.cc).
  Status run(const AllReduceArgs& a, double timeout_s) override;
  Status run(const ReduceArgs& a, double timeout_s) override;
  Status run(const BroadcastArgs& a, double timeout_s) override;
  Status run(const AllGatherArgs& a, double timeout_s) override;
  Status run(const ReduceScatterArgs& a, double timeout_s) override;
  Result<std::shared_ptr<Communicator>> split(int color, int key, const CommOptions& opts) override;
  Result<std::shared_ptr<Communicator>> new_group(const std::vector<int>& ranks, const CommOptions& opts) override;
  Status monitored_barrier(double timeout_s, bool wait_all_ranks, std::vector<int>* missing) override;
  Result<std::shared_ptr<Communicator>> shrink(const CommOptions& opts) override;
  Result<std::shared_ptr<Communicator>> shrink_excluding(const std::vector<int>& exclude,
                                                         const CommOptions& opts) override;
  Result<std::shared_ptr<Communicator>> grow(int new_size, const std::string& tag, const CommOptions& opts) override;
  // The agreement listener (core/agreement.h), and the one of the communicator this one was
  // shrunk from: kept so that late survivors still learn the decision while this one lives.
  void set_agreement(std::shared_ptr<AgreementPort> mine, std::shared_ptr<AgreementPort> inherited) {
    agree_ = std::move(mine);
    inherited_agree_ = std::move(inherited);
  }
  std::shared_ptr<void> will_wait() override;
  void abort(const std::string& why) override;
  Status error() override;
  std::string describe() override;
  std::shared_ptr<Store> store() override { return store_; }

 private:
  struct Call {  // what the Envelope says about a call
    Collective coll;
    uint64_t count;
    DataType dtype;
    RedOp op;
    int root;
  };
  // What an operation's task sees (OpEnv) for a call; reads the topology first if it must.
  Result<OpEnv> make_env(const Call& c, const MemoryLoc& mem, uintptr_t stream, OpStats* stats);
  // The express path (core/express.cc). A blocking call (run) passes an Express to the
  // collective's *_impl; express_cached() runs it on the cached task when its key matches and
  // the engine is idle, issue() on a new task (kept for next time) when only the latter holds.
  // Otherwise the call is issued as usual and run() waits for its Work.
  struct ExpressKey {
    Call c;
    const void* send;
    const void* recv;
    double scalar;
    bool same(const ExpressKey& o) const;
  };
  struct Express {
    ExpressKey key;
    double timeout_s;
    Status status;
    bool ran = false;
  };
  bool express_cached(const Call& c, const MemoryLoc& mem, Express* x);
  bool express_new(const Call& c, ScheduleTask::Builder& build, const MemoryLoc& mem, Express* x);
  bool express_start(std::unique_lock<std::mutex>& issue_lock, Express* x);  // with express_task_ set
  // run(args): the call's *_impl with an Express, then its status, or its Work's when it was queued.
  template <class Args>
  Status run_blocking(Result<WorkPtr> (CommunicatorImpl::*impl)(const Args&, Express*), const Args& a, double scalar,
                      double timeout_s);
  Result<WorkPtr> all_reduce_impl(const AllReduceArgs& a, Express* x);
  Result<WorkPtr> reduce_impl(const ReduceArgs& a, Express* x);
  Result<WorkPtr> broadcast_impl(const BroadcastArgs& a, Express* x);
  Result<WorkPtr> all_gather_impl(const AllGatherArgs& a, Express* x);
  Result<WorkPtr> reduce_scatter_impl(const ReduceScatterArgs& a, Express* x);
  Result<WorkPtr> issue(const Call& c, ScheduleTask::Builder build, std::vector<P2POp>* p2p_ops = nullptr,
                        const MemoryLoc& mem = MemoryLoc(), uintptr_t stream = 0, Express* x = nullptr);
  // Where the call's buffers live: host, or one device of one backend (a mix is refused).
  Result<MemoryLoc> where(const char* what, std::initializer_list<const void*> bufs);
  Status check_common(const char* what, DataType dt, size_t count, const void* send, const void* recv,
                      bool need_recv = true);
  CommOptions merged(const CommOptions& child) const;
  // The topology, fetched from the store on first use. A failed fetch (the store gone, a peer
  // that never published its PeerInfo) is kept and returned, a vanished store naming the rank
  // that served it (store_failure).
  Result<std::shared_ptr<const Topology>> fetch_topology();
  // fetch_topology() for what can do without one (describe, estimates): nullptr on failure,
  // warned once.
  std::shared_ptr<const Topology> topology();
  // A store operation's failure as the communicator reports it: where rank 0's process served
  // the store, its vanishing is a RemoteError naming rank 0 (a timeout stays one).
  Status store_failure(const Status& s) const;
  // What estimates read: the probed topology once a collective probed, else topology() (never
  // the probe itself, which needs the peers).
  std::shared_ptr<const Topology> estimate_topology();
  // The topology the algorithms choose with: topology() with the link rates the probe measured
  // (core/link_probe.h), probed on the first call. Collective: every rank calls it at the same
  // operation (the first one that needs_topology()). Fails when the topology is unavailable:
  // a rank without it cannot choose the algorithm its peers choose (make_env then fails the
  // communicator, so the peers learn why instead of waiting for messages that never come).
  Result<std::shared_ptr<const Topology>> probed_topology();

  const int rank_, size_;
  std::shared_ptr<Store> store_;
  CommOptions opts_;
  std::shared_ptr<Engine> engine_;
  const Algorithm algo_;           // resolved once: options, then UCCL_ALGO
  const size_t small_msg_bytes_;
  ScratchArena scratch_;
  ScratchArena dev_scratch_;  // device operations' scratch (on the device of the executing op)
  SelectionState choices_;  // the algorithm choices this communicator remembers (select.h)
  ExecState exec_;  // reused by each executing operation in turn (see ExecState)
  // The express path's task, kept for the next call with the same key (under issue_mu_).
  std::optional<ScheduleTask> express_task_;
  ExpressKey express_key_{};
  const bool express_on_;  // UCCL_EXPRESS
  std::mutex issue_mu_;          // sequence numbers are assigned in issue order
  uint64_t coll_seq_ = 0;        // collectives issued (every rank counts the same)
  uint64_t subcomm_seq_ = 0;     // split/new_group calls, for unique store prefixes
  TopologyCache topo_;
  std::atomic<bool> topo_warned_{false};
  std::mutex probe_mu_;
  std::shared_ptr<const Topology> probed_;  // set once probed (or nothing to probe)
  std::atomic<bool> probed_set_{false};     // probed_ is set (never changes after): read it without probe_mu_
  Status probe_failed_;
  std::atomic<bool> cpu_sharers_noted_{false};  // note_cpu_sharers() called (core/idle_wait.h)
  std::shared_ptr<AgreementPort> agree_, inherited_agree_;
  uint32_t next_shrink_instance_ = 0;  // the agreement instance shrink() runs next
  // shrink() and shrink_excluding(): `exclude` null for the former (sorted, checked otherwise).
  Result<std::shared_ptr<Communicator>> shrink_agreed(const std::vector<int>* exclude, const CommOptions& opts);
};

}  // namespace uccl
