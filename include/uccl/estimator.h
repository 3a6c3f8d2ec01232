// Estimator: a Communicator that runs nothing and adds up what its operations would take.
//
// Public (include/uccl). Every operation issued to it is checked (dtype, reduction op, root,
// peers, counts against the group) and answered with a Work that has already completed, without
// touching a buffer or sending a message; the time `real` predicts for it
// (Communicator::estimate / estimate_p2p, the algorithm uccl would choose on its topology) is
// added to seconds(). Why: PyTorch's torch.distributed._time_estimator (and inductor's overlap
// scheduling behind it) runs a program's collectives through the backend in this mode, as
// NCCL's ncclGroupSimulateEnd does; a planner can do the same with any code that takes a
// Communicator. Operations are predicted one after another (their times add up); what the real
// communicator runs concurrently is not modelled. Everything that is not an operation (error,
// describe, store, abort) is the real communicator's; split, shrink, grow and the monitored
// barrier are refused (kNotSupported: they would have to talk to the peers).
#pragma once

#include <memory>
#include <mutex>

#include "uccl/communicator.h"

namespace uccl {

class Estimator : public Communicator {
 public:
  explicit Estimator(std::shared_ptr<Communicator> real);

  // Predicted seconds of every operation issued so far.
  double seconds() const;
  // How many operations were predicted, and the first failure to predict one (Ok if none): an
  // operation that cannot be predicted still completes, with its time left out.
  size_t operations() const;
  Status first_error() const;
  const std::shared_ptr<Communicator>& real() const { return real_; }

  int rank() const override { return real_->rank(); }
  int size() const override { return real_->size(); }
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
  Result<double> estimate(Collective coll, size_t total_bytes, int root = 0) override {
    return real_->estimate(coll, total_bytes, root);
  }
  Result<double> estimate_p2p(const std::vector<P2POp>& ops) override { return real_->estimate_p2p(ops); }
  Result<std::shared_ptr<Communicator>> split(int color, int key, const CommOptions& opts = {}) override;
  Result<std::shared_ptr<Communicator>> new_group(const std::vector<int>& ranks, const CommOptions& opts = {}) override;
  void abort(const std::string& why = "abort() called") override { real_->abort(why); }
  Status error() override { return real_->error(); }
  std::string describe() override { return real_->describe(); }
  std::shared_ptr<Store> store() override { return real_->store(); }

 private:
  // Checks what the real communicator would refuse at once, then adds the prediction.
  Result<WorkPtr> add(Collective coll, const char* what, Status checked, size_t total_bytes, int root);
  Result<WorkPtr> add_result(Collective coll, Result<double> t);

  const std::shared_ptr<Communicator> real_;
  mutable std::mutex mu_;
  double seconds_ = 0;
  size_t ops_ = 0;
  Status first_error_;
};

}  // namespace uccl
