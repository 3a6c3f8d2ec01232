// UcclBackend: the c10d::Backend behind torch.distributed's "uccl" backend.
//
// Each op checks its tensors (CPU, dense, dtypes and sizes agree), stages non-contiguous
// tensors through contiguous copies, issues one or more uccl operations and returns a UcclWork
// whose Future completes with the output tensors. Lifecycle (construction over torch's store,
// abort/shutdown, coalescing, p2p, split) lives in backend.cc; the collectives in collectives.cc
// (reductions) and collectives_move.cc (the rest).
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <memory>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "uccl/communicator.h"
#include "uccl/estimator.h"
#include "work.h"

namespace uccl_torch {

class UcclBackend : public c10d::Backend {
 public:
  // Collective over `store` (the group's prefixed store): every rank of the group calls it.
  // Throws (ValueError / DistBackendError) when the communicator cannot be made.
  UcclBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, const uccl::CommOptions& opts);
  // Over a communicator made by create_comm() (the Status-returning path, for callers that want
  // the error's code and peer rather than an exception: uccl.torch.ReconfigurableProcessGroup).
  UcclBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, const uccl::CommOptions& opts,
              std::shared_ptr<uccl::Communicator> comm);
  // The membership check (membership.h), then uccl's rendezvous over `store`.
  static uccl::Result<std::shared_ptr<uccl::Communicator>> create_comm(const c10::intrusive_ptr<c10d::Store>& store,
                                                                      int rank, int size,
                                                                      const uccl::CommOptions& opts);
  ~UcclBackend() override;

  const std::string getBackendName() const override { return "uccl"; }
  c10::intrusive_ptr<Options> getBackendOptions() override;
  bool supportsSplitting() const override { return true; }
  bool supportsCoalescing() const override { return true; }
  // torch.distributed.shrink_group (NCCL's ncclCommShrink elsewhere): uccl's agreed shrink with
  // the ranks to exclude named (Communicator::shrink_excluding), on CPU and device groups alike.
  bool supportsShrinking() const override { return true; }
  c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t>& ranks_to_exclude, int shrink_flags = 0,
                                           const c10::intrusive_ptr<Options>& opts_override = nullptr) override;
  void setTimeout(std::chrono::milliseconds timeout) override;

  // Collectives (collectives.cc, collectives_move.cc).
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts = {}) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts = {}) override;
  // ProcessGroup.monitored_barrier (Gloo's alone in torch): the core's monitored_barrier, its
  // outcome in Gloo's words ("[Rank 0]: Rank 2 failed to pass monitoredBarrier in 1000 ms").
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks = false) override;
  // all_reduce of a sparse COO tensor (collectives_sparse.cc; allreduce() sends sparse tensors here).
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(at::Tensor& t, const c10d::AllreduceOptions& opts);

  // Point-to-point and coalescing (backend.cc).
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  // Lifecycle (backend.cc).
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;
  // ProcessGroup.merge_remote_group: every process of the merged group calls it on a group of
  // its own, with one store they share (torch numbers them through it): a new communicator of
  // `size` over that store, with this group's options.
  c10::intrusive_ptr<c10d::Backend> merge(const c10::intrusive_ptr<c10d::Store>& store,
                                          const c10::intrusive_ptr<Options>& opts, const int& rank,
                                          const int& size) override;
  c10d::ErrorType getError() override;
  void abort() override;
  void shutdown() override;
  // ProcessGroup._register_on_completion_hook (NCCL's alone in torch): one hook per group, fired
  // for every work that finishes from now on (work.h CompletionHook); dropped at shutdown.
  void registerOnCompletionHook(std::function<void(std::shared_ptr<c10d::WorkInfo>)>&& hook) override;
  // Returns once every work started so far has settled its Future and run the hook (NCCL's
  // alone in torch; destroy_process_group calls it on a group with a hook, so that no hook runs
  // after the interpreter is gone).
  void waitForPendingWorks() override;
  // Every uccl work is timed (getDuration), so there is nothing to turn on.
  void enableCollectivesTiming() override {}
  // torch.distributed._time_estimator (NCCL's alone in torch; inductor's overlap scheduling asks
  // it): between start and end every operation of this group runs nothing and completes at once,
  // and what uccl predicts for each (uccl::Estimator: the algorithm it would choose on this
  // group's topology) adds up. end returns the total in microseconds, negative when an operation
  // could not be predicted (torch then has no estimate, as with NCCL's -1000).
  bool supportsTimeEstimation() const override { return true; }
  void start_time_estimate();
  double end_time_estimate();
  bool estimating() const { return estimator_ != nullptr; }  // callers hold mu_
  void setSequenceNumberForGroup() override {}  // uccl numbers ops itself, from 0 on every rank
  uint64_t getSequenceNumberForGroup() override { return seq_; }

  // Extras for Python (uccl._torch).
  std::string describe();
  // The communicator's first error (Ok if none, or once shut down): code and peer for Python's
  // typed errors (ReconfigurableProcessGroup.errored()).
  uccl::Status last_error();
  const uccl::CommOptions& comm_options() const { return opts_; }
  // Bytes moved by this group's finished ops so far (TrafficTotals).
  const std::shared_ptr<TrafficTotals>& traffic() const { return traffic_; }

  // Building blocks of every op (used by backend.cc and the collectives). Callers hold mu_.
  std::recursive_mutex& issue_mutex() { return mu_; }
  // The communicator, or a DistBackendError if the group was shut down or aborted.
  uccl::Communicator& comm(const char* op);
  // The same, held, for calls that block without mu_ (shrink, monitored barrier).
  std::shared_ptr<uccl::Communicator> live_comm(const char* op);
  // This group's timeout as torch reports it (getBackendOptions), and its options with a torch
  // Options' timeout and group name applied (split, shrink).
  std::chrono::milliseconds group_timeout() const;
  uccl::CommOptions options_with(const c10::intrusive_ptr<Options>& opts) const;
  // A new work for one op; the caller adds uccl works and epilogues, then calls launch().
  c10::intrusive_ptr<UcclWork> make_work(c10d::OpType type, const char* name, std::vector<at::Tensor> outputs,
                                         std::chrono::milliseconds timeout);
  // Adds the issued uccl op to w, or throws its error.
  void add_op(UcclWork& w, uccl::Result<uccl::WorkPtr> r);
  // Starts w; inside a coalescing block also records it so that endCoalescing() waits for it.
  c10::intrusive_ptr<c10d::Work> launch(const c10::intrusive_ptr<UcclWork>& w);

 private:
  c10::intrusive_ptr<c10d::Work> p2p(std::vector<at::Tensor>& tensors, int peer, int tag, bool is_send);

  std::shared_ptr<uccl::Communicator> comm_;  // the estimator while estimating (its real() otherwise)
  std::shared_ptr<uccl::Estimator> estimator_;
  c10::intrusive_ptr<c10d::Store> store_;
  uccl::CommOptions opts_;
  std::shared_ptr<CompletionQueue> cq_;
  std::shared_ptr<TrafficTotals> traffic_ = std::make_shared<TrafficTotals>();
  std::shared_ptr<CompletionHook> hook_ = std::make_shared<CompletionHook>();
  // Serializes op issue: uccl's per-communicator ordering is the caller's issue order, and the
  // coalescing state below is shared.
  std::recursive_mutex mu_;
  uint64_t seq_ = 0;
  bool closed_ = false;
  std::string closed_why_;

  // torch's splitGroup and mergeRemoteGroup call split() / merge() once per device type the
  // parent serves ("cpu" and "cuda" map to this one backend): the second call must get the same
  // child, not a second communicator rendezvousing on the same store keys.
  c10::intrusive_ptr<c10d::Backend> child_once(const std::string& key,
                                               const std::function<c10::intrusive_ptr<c10d::Backend>()>& make);
  std::string last_child_key_;
  c10::weak_intrusive_ptr<c10d::Backend> last_child_{c10::intrusive_ptr<c10d::Backend>()};

  // The device of the last op that used device memory in place: barrier() synchronizes the
  // caller's current stream of it, as ProcessGroupNCCL's does (guarded by mu_).
  std::optional<at::Device> last_device_;

  bool coalescing_ = false;
  std::vector<uccl::P2POp> co_p2p_;
  std::vector<at::Tensor> co_keep_;                     // staged p2p buffers of the block
  std::vector<std::function<void()>> co_epilogues_;     // copy-backs of staged recvs
  std::vector<c10::intrusive_ptr<UcclWork>> co_p2p_works_;  // returned by send/recv in the block
  std::vector<c10::intrusive_ptr<UcclWork>> co_colls_;      // collectives issued in the block
};

}  // namespace uccl_torch
