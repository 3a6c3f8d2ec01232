// uccl::Estimator (contract in include/uccl/estimator.h).
#include "uccl/estimator.h"

#include <numeric>
#include <string>

#include "core/arg_checks.h"

namespace uccl {

namespace {

// The Work of an estimated operation: done, successfully, before it is returned.
class EstimatedWork : public Work {
 public:
  explicit EstimatedWork(Collective c) : coll_(c) {}
  Status wait(double) override { return Status::Ok(); }
  bool is_completed() override { return true; }
  Status status() override { return Status::Ok(); }
  uint64_t seq() const override { return 0; }
  Collective collective() const override { return coll_; }
  OpStats stats() override {
    OpStats s;
    s.algorithm = "estimated";
    return s;
  }
  void on_complete(std::function<void(const Status&)> fn) override { fn(Status::Ok()); }
  Status wait_stream(uintptr_t) override { return Status::Ok(); }  // nothing to wait for

 private:
  const Collective coll_;
};

// A reduction's dtype, then its op (what the communicator checks, in its order).
Status check_reduction(const char* what, DataType dt, RedOp op) {
  UCCL_RETURN_IF_ERROR(check_dtype(what, dt));
  return check_op(what, dt, op);
}

Status check_counts(const char* what, const char* name, size_t n, int size) {
  if (n != static_cast<size_t>(size))
    return InvalidArgument(std::string(what) + ": " + name + " has " + std::to_string(n) + " entries for " +
                           std::to_string(size) + " ranks");
  return Status::Ok();
}

size_t sum(const std::vector<size_t>& v) { return std::accumulate(v.begin(), v.end(), size_t{0}); }

}  // namespace

Estimator::Estimator(std::shared_ptr<Communicator> real) : real_(std::move(real)) {}

double Estimator::seconds() const {
  std::lock_guard<std::mutex> lk(mu_);
  return seconds_;
}

size_t Estimator::operations() const {
  std::lock_guard<std::mutex> lk(mu_);
  return ops_;
}

Status Estimator::first_error() const {
  std::lock_guard<std::mutex> lk(mu_);
  return first_error_;
}

Result<WorkPtr> Estimator::add_result(Collective coll, Result<double> t) {
  std::lock_guard<std::mutex> lk(mu_);
  ++ops_;
  if (t.ok()) seconds_ += t.value();
  else if (first_error_.ok()) first_error_ = t.status();
  return WorkPtr(std::make_shared<EstimatedWork>(coll));
}

Result<WorkPtr> Estimator::add(Collective coll, const char* what, Status checked, size_t total_bytes, int root) {
  UCCL_RETURN_IF_ERROR(checked);
  Status e = real_->error();  // a failed communicator refuses operations: so does its estimate
  if (!e.ok()) return e;
  UCCL_RETURN_IF_ERROR(check_root(what, root, size()));
  return add_result(coll, real_->estimate(coll, total_bytes, root));
}

Result<WorkPtr> Estimator::all_reduce(const AllReduceArgs& a) {
  return add(Collective::kAllReduce, "all_reduce", check_reduction("all_reduce", a.dtype, a.op),
             a.count * dtype_size(a.dtype), 0);
}

Result<WorkPtr> Estimator::reduce(const ReduceArgs& a) {
  return add(Collective::kReduce, "reduce", check_reduction("reduce", a.dtype, a.op), a.count * dtype_size(a.dtype),
             a.root);
}

Result<WorkPtr> Estimator::broadcast(const BroadcastArgs& a) {
  return add(Collective::kBroadcast, "broadcast", check_dtype("broadcast", a.dtype), a.count * dtype_size(a.dtype),
             a.root);
}

Result<WorkPtr> Estimator::all_gather(const AllGatherArgs& a) {
  return add(Collective::kAllGather, "all_gather", check_dtype("all_gather", a.dtype),
             a.count * size() * dtype_size(a.dtype), 0);
}

Result<WorkPtr> Estimator::all_gather_v(const AllGatherVArgs& a) {
  Status s = check_dtype("all_gather_v", a.dtype);
  if (s.ok()) s = check_counts("all_gather_v", "recv_counts", a.recv_counts.size(), size());
  return add(Collective::kAllGatherV, "all_gather_v", s, sum(a.recv_counts) * dtype_size(a.dtype), 0);
}

Result<WorkPtr> Estimator::reduce_scatter(const ReduceScatterArgs& a) {
  return add(Collective::kReduceScatter, "reduce_scatter", check_reduction("reduce_scatter", a.dtype, a.op),
             a.count * size() * dtype_size(a.dtype), 0);
}

Result<WorkPtr> Estimator::reduce_scatter_v(const ReduceScatterVArgs& a) {
  Status s = check_reduction("reduce_scatter_v", a.dtype, a.op);
  if (s.ok()) s = check_counts("reduce_scatter_v", "recv_counts", a.recv_counts.size(), size());
  return add(Collective::kReduceScatterV, "reduce_scatter_v", s, sum(a.recv_counts) * dtype_size(a.dtype), 0);
}

Result<WorkPtr> Estimator::all_to_all(const AllToAllArgs& a) {
  return add(Collective::kAllToAll, "all_to_all", check_dtype("all_to_all", a.dtype),
             a.count * size() * dtype_size(a.dtype), 0);
}

Result<WorkPtr> Estimator::all_to_all_v(const AllToAllVArgs& a) {
  Status s = check_dtype("all_to_all_v", a.dtype);
  if (s.ok()) s = check_counts("all_to_all_v", "send_counts", a.send_counts.size(), size());
  if (s.ok()) s = check_counts("all_to_all_v", "recv_counts", a.recv_counts.size(), size());
  return add(Collective::kAllToAllV, "all_to_all_v", s, sum(a.send_counts) * dtype_size(a.dtype), 0);
}

Result<WorkPtr> Estimator::gather(const GatherArgs& a) {
  return add(Collective::kGather, "gather", check_dtype("gather", a.dtype), a.count * size() * dtype_size(a.dtype),
             a.root);
}

Result<WorkPtr> Estimator::scatter(const ScatterArgs& a) {
  return add(Collective::kScatter, "scatter", check_dtype("scatter", a.dtype), a.count * size() * dtype_size(a.dtype),
             a.root);
}

Result<WorkPtr> Estimator::barrier() { return add(Collective::kBarrier, "barrier", Status::Ok(), 0, 0); }

Result<WorkPtr> Estimator::p2p(const std::vector<P2POp>& ops) {
  Status e = real_->error();
  if (!e.ok()) return e;
  auto t = real_->estimate_p2p(ops);
  if (!t.ok() && t.status().code() == Code::kInvalidArgument) return t.status().with_context("p2p");
  return add_result(Collective::kSendRecv, std::move(t));
}

Result<std::shared_ptr<Communicator>> Estimator::split(int, int, const CommOptions&) {
  return Status(Code::kNotSupported, "split inside an estimate: nothing runs there, and a split needs the peers");
}

Result<std::shared_ptr<Communicator>> Estimator::new_group(const std::vector<int>&, const CommOptions&) {
  return Status(Code::kNotSupported, "new_group inside an estimate: nothing runs there, and a group needs the peers");
}

}  // namespace uccl
