// Communicator::estimate / estimate_p2p (contract in include/uccl/communicator.h): what the
// selection table and the cost model say an operation would take, on the topology this
// communicator chooses with, computed locally.
//
// Why the probed topology only when it is there: the probe is collective (every rank takes part
// in its measurements), and an estimate must never wait for a peer - torch asks for one on a
// rank while the others may be compiling something else. Before the probe the rates are the
// declared, sysfs or default ones (what `describe()` and `python -m uccl.info` show).
#include <algorithm>
#include <string>

#include "algorithms/select.h"
#include "core/arg_checks.h"
#include "core/communicator_impl.h"
#include "topology/cost_model.h"

namespace uccl {

namespace {

Status no_topology() {
  return Status(Code::kNotSupported,
                "estimate: this communicator has no topology to predict with (fetching the peers' "
                "information from the store failed; see the warning logged then)");
}

}  // namespace

std::shared_ptr<const Topology> CommunicatorImpl::estimate_topology() {
  return probed_set_.load(std::memory_order_acquire) ? probed_ : topology();
}

Result<double> CommunicatorImpl::estimate(Collective coll, size_t total_bytes, int root) {
  if (coll == Collective::kSendRecv)
    return InvalidArgument("estimate: point-to-point ops are estimated by estimate_p2p (their peers matter)");
  if (static_cast<int>(coll) > static_cast<int>(Collective::kAllToAllV))
    return InvalidArgument("estimate: invalid collective " + std::to_string(static_cast<int>(coll)));
  UCCL_RETURN_IF_ERROR(check_root("estimate", root, size_));
  if (size_ == 1) return 0.0;
  const std::shared_ptr<const Topology> topo = estimate_topology();
  if (!topo) return no_topology();
  SelectRequest req;
  req.coll = coll;
  req.bytes = total_bytes;
  req.size = size_;
  req.root = root;
  req.topo = topo.get();
  req.forced = algo_;
  req.small_msg_bytes = small_msg_bytes_;
  // What the selection picks with req.forced, as the operation would: a forced algorithm that
  // cannot run here gives way to the plain ones there too (predict_algorithm(req, algo_) refused).
  auto t = predict_algorithm(req, Algorithm::kAuto);
  if (!t.ok()) return t.status().with_context("estimate");
  if (t.value() < 0)
    return Status(Code::kNotSupported, std::string("estimate: no prediction for ") + collective_name(coll));
  return t.value();
}

Result<double> CommunicatorImpl::estimate_p2p(const std::vector<P2POp>& ops) {
  std::vector<Flow> flows;
  std::shared_ptr<const Topology> topo;
  for (const P2POp& op : ops) {
    if (op.peer != kAnySource && (op.peer < 0 || op.peer >= size_))
      return InvalidArgument("estimate_p2p: peer " + std::to_string(op.peer) + " out of range for " +
                             std::to_string(size_) + " ranks");
    UCCL_RETURN_IF_ERROR(check_dtype("estimate_p2p", op.dtype));
  }
  if (ops.empty()) return 0.0;
  topo = estimate_topology();
  if (!topo) return no_topology();
  for (const P2POp& op : ops) {
    int peer = op.peer;
    if (peer == kAnySource) {  // the nearest other rank (itself when alone)
      peer = rank_;
      for (int r = 0; r < size_; ++r) {
        if (r != rank_ && (peer == rank_ || topo->level(rank_, r) < topo->level(rank_, peer))) peer = r;
      }
    }
    if (peer == rank_) continue;  // to itself: a local copy, not in the model
    const double bytes = static_cast<double>(op.count) * static_cast<double>(dtype_size(op.dtype));
    flows.push_back(op.is_send ? Flow{rank_, peer, bytes} : Flow{peer, rank_, bytes});
  }
  return phase_time(*topo, flows);
}

}  // namespace uccl
