#include "transports/verbs/verbs_lanes.h"

#include <algorithm>

#include "transports/stripe.h"

namespace uccl {

StripePlan StripePlan::make(size_t bytes, size_t nqp) {
  StripePlan p;
  p.stripe = bytes;
  if (nqp > 1) {
    p.stripe = std::max(kMinStripe, (bytes + nqp - 1) / nqp);
    p.stripe = (p.stripe + 4095) / 4096 * 4096;
  }
  p.stripe = std::max<size_t>(1, std::min(p.stripe, kMaxWrite));
  p.pieces = (bytes + p.stripe - 1) / p.stripe;
  p.qps_used = std::min(nqp, p.pieces);
  return p;
}

std::vector<LanePiece> lane_pieces(size_t bytes, const std::vector<double>& weights, const std::vector<size_t>& qps) {
  std::vector<LanePiece> out;
  if (bytes == 0 || qps.empty()) return out;
  std::vector<StripePart> parts;
  if (weights.size() > 1 && weights.size() == qps.size() && bytes >= kMinLaneBytes)
    parts = weighted_parts(bytes, weights, 0);
  else
    parts.push_back({0, 0, bytes});
  std::vector<size_t> base(qps.size(), 0);
  for (size_t l = 1; l < qps.size(); ++l) base[l] = base[l - 1] + qps[l - 1];
  std::vector<std::vector<LanePiece>> per_lane;
  size_t most = 0;
  for (const StripePart& part : parts) {
    const size_t lane = part.socket, nqp = std::max<size_t>(1, qps[lane]);
    const StripePlan plan = StripePlan::make(part.bytes, nqp);
    std::vector<LanePiece> v;
    for (size_t p = 0; p < plan.pieces; ++p) {
      LanePiece lp;
      lp.lane = lane;
      lp.qp = base[lane] + p % nqp;
      lp.offset = part.offset + p * plan.stripe;
      lp.bytes = std::min(plan.stripe, part.offset + part.bytes - lp.offset);
      lp.with_imm = p + nqp >= plan.pieces;
      v.push_back(lp);
    }
    most = std::max(most, v.size());
    per_lane.push_back(std::move(v));
  }
  for (size_t i = 0; i < most; ++i)
    for (auto& v : per_lane)
      if (i < v.size()) out.push_back(v[i]);
  return out;
}

uint64_t imm_mask(const std::vector<LanePiece>& pieces) {
  uint64_t m = 0;
  for (const LanePiece& p : pieces)
    if (p.with_imm) m |= uint64_t(1) << p.qp;
  return m;
}

uint64_t expected_imms(size_t bytes, bool adaptive, const std::vector<double>& weights, const std::vector<size_t>& qps) {
  if (adaptive && stripes_adaptively(bytes, qps.size())) {
    size_t total = 0;
    for (size_t n : qps) total += n;
    return total >= 64 ? ~uint64_t(0) : (uint64_t(1) << total) - 1;
  }
  return imm_mask(lane_pieces(bytes, weights, qps));
}

StripeLoad::StripeLoad(const std::vector<size_t>& qps) : lane_qps_(qps), lane_load_(qps.size(), 0) {
  for (size_t l = 0; l < qps.size(); ++l) {
    lane_first_.push_back(qp_lane_.size());
    for (size_t q = 0; q < qps[l]; ++q) qp_lane_.push_back(l);
  }
  qp_load_.assign(qp_lane_.size(), 0);
  fifo_.resize(qp_lane_.size());
}

size_t StripeLoad::pick(size_t limit) const {
  limits_.assign(lane_load_.size(), limit);  // no allocation once sized
  const size_t lane = least_committed_lane(lane_load_, limits_);
  if (lane == SIZE_MAX || lane_qps_[lane] == 0) return SIZE_MAX;
  size_t best = lane_first_[lane];
  for (size_t q = best + 1; q < lane_first_[lane] + lane_qps_[lane]; ++q)
    if (qp_load_[q] < qp_load_[best]) best = q;
  return best;
}

void StripeLoad::posted(size_t qp, size_t bytes) {
  fifo_[qp].push_back(bytes);
  qp_load_[qp] += bytes;
  lane_load_[qp_lane_[qp]] += bytes;
}

void StripeLoad::completed(size_t qp) {
  if (qp >= fifo_.size() || fifo_[qp].empty()) return;
  const size_t b = fifo_[qp].front();
  fifo_[qp].pop_front();
  qp_load_[qp] -= b;
  lane_load_[qp_lane_[qp]] -= b;
}

void AdaptiveCut::start(size_t n, size_t c, size_t total_qps) {
  bytes = n;
  sent = 0;
  chunk = std::min(kMaxWrite, std::max(kStripeAlign, c / kStripeAlign * kStripeAlign));
  owe_imm = total_qps >= 64 ? ~uint64_t(0) : (uint64_t(1) << total_qps) - 1;
}

LanePiece AdaptiveCut::next_chunk(size_t qp, size_t lane) {
  LanePiece p;
  p.lane = lane;
  p.qp = qp;
  p.offset = sent;
  p.bytes = std::min(chunk, bytes - sent);
  sent += p.bytes;
  p.with_imm = sent == bytes;
  if (p.with_imm) closed(qp);
  return p;
}

bool AdaptiveCut::closing(const std::vector<size_t>& qp_lane, LanePiece* out) const {
  if (data_left() || owe_imm == 0) return false;
  size_t q = 0;
  while (!(owe_imm >> q & 1)) ++q;
  if (q >= qp_lane.size()) return false;
  *out = LanePiece();
  out->lane = qp_lane[q];
  out->qp = q;
  out->with_imm = true;  // offset 0, no bytes: only the immediate
  return true;
}

double lane_rate(const LanePort& a, const LanePort& b) {
  return a.gbps > 0 && b.gbps > 0 ? std::min(a.gbps, b.gbps) : std::max(a.gbps, b.gbps);
}

std::vector<int> match_lanes(const std::vector<LanePort>& offered, const std::vector<LanePort>& local) {
  std::vector<int> out(offered.size(), -1);
  std::vector<bool> used(local.size(), false);
  size_t paired = 0;
  double first_rate = 0;
  for (size_t i = 0; i < offered.size() && paired < kMaxLanes; ++i) {
    const LanePort& o = offered[i];
    int best = -1;
    for (size_t j = 0; j < local.size(); ++j) {
      const LanePort& m = local[j];
      if (used[j] || m.link_layer != o.link_layer || m.fabric.empty() || m.fabric != o.fabric) continue;
      if (best < 0 || (local[best].address == o.address && m.address != o.address)) best = static_cast<int>(j);
    }
    if (best < 0) continue;
    const double rate = lane_rate(o, local[best]);
    if (i == 0) first_rate = rate;
    else if (out[0] >= 0 && rate > 0 && first_rate > 0 && rate < 0.5 * first_rate) continue;
    out[i] = best;
    used[best] = true;
    ++paired;
  }
  return out;
}

}  // namespace uccl
