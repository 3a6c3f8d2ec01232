// VerbsEndpoint's lanes (verbs_lanes.h): the QP numbering across the connection, the lanes the
// passive side keeps once READY named those the active side connected, per-lane registrations,
// and describe().
#include "transports/stripe.h"
#include "transports/verbs/verbs_endpoint.h"

namespace uccl {

// ---- lanes -------------------------------------------------------------------------------------

void VerbsEndpoint::layout_lanes() {
  qp_lane_.clear(), qp_local_.clear(), qp_base_.clear(), lane_qps_.clear(), weights_.clear();
  std::vector<double> gbps;
  for (size_t l = 0; l < lanes_.size(); ++l) {
    lane_pos_[lanes_[l].id] = l;
    qp_base_.push_back(qp_lane_.size());
    lane_qps_.push_back(lanes_[l].ch->nqp());
    for (size_t q = 0; q < lanes_[l].ch->nqp(); ++q) qp_lane_.push_back(l), qp_local_.push_back(q);
    gbps.push_back(lanes_[l].gbps);
  }
  if (lanes_.size() > 1) weights_ = rate_weights(gbps);
  load_ = StripeLoad(lane_qps_);
  sq_used_.assign(qp_lane_.size(), 0);
  data_credits_.assign(qp_lane_.size(), kDataWqes);
}

// READY named the lanes the active side connected (0 from a peer that does not stripe).
void VerbsEndpoint::keep_lanes(uint64_t mask) {
  mask |= 1;  // lane 0 always
  bool all = true;
  for (auto& l : lanes_) all &= (mask >> l.id & 1) != 0;
  if (all) return;
  std::vector<VerbsLane> kept;
  for (auto& l : lanes_) {
    if (mask >> l.id & 1) {
      kept.push_back(std::move(l));
      continue;
    }
    left_out_ += (left_out_.empty() ? "" : "; ") + l.ch->device().name() + ": not connected by the peer";
    l.ch->to_error();
  }
  lanes_ = std::move(kept);  // nothing was posted on a dropped lane yet (we had not sent a thing)
  ch_ = lanes_[0].ch.get();
  layout_lanes();
}

void VerbsEndpoint::release_mrs(MrRef* mrs) {
  for (size_t l = 0; l < lanes_.size(); ++l) lanes_[l].ch->device().mr_cache().release(&mrs[l]);
}

std::string VerbsEndpoint::describe() const {
  const VerbsDevice& d = ch_->device();
  std::string s = "verbs ";
  if (lanes_.size() == 1) {
    s += d.name() + " ";
  } else {
    s += "striped over ";
    for (size_t l = 0; l < lanes_.size(); ++l) {
      const VerbsLane& lane = lanes_[l];
      s += (l ? ", " : "") + lane.ch->device().name() + " (to " + lane.peer_device +
           (lane.gbps > 0 ? ", " + std::to_string(static_cast<int>(lane.gbps + 0.5)) + " Gbit/s" : "") + ")";
    }
    s += ": ";
  }
  s += d.port().nic.link_layer;
  if (d.port().gid_index >= 0) s += " gid-idx " + std::to_string(d.port().gid_index);
  size_t n = qp_lane_.size();
  s += " mtu " + std::to_string(mtu_bytes(ch_->path_mtu())) + " (" + std::to_string(n) + (n == 1 ? " QP" : " QPs");
  if (!left_out_.empty()) s += "; left out: " + left_out_;
  return s + ")";
}

}  // namespace uccl
