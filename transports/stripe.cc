#include "transports/stripe.h"

#include <algorithm>
#include <cstdint>

namespace uccl {

std::vector<StripePart> weighted_parts(size_t bytes, const std::vector<double>& weights, size_t first) {
  const size_t n = weights.size();
  double total = 0;
  for (double w : weights) total += w;
  std::vector<StripePart> out;
  size_t begin = 0;
  double cum = 0;
  for (size_t i = 0; i < n && begin < bytes; ++i) {
    const size_t sock = (first + i) % n;
    cum += weights[sock];
    size_t end = i + 1 == n ? bytes : static_cast<size_t>(static_cast<double>(bytes) * (cum / total));
    end = i + 1 == n ? bytes : std::min(bytes, end / kStripeAlign * kStripeAlign);
    if (end > begin) {
      out.push_back({sock, begin, end - begin});
      begin = end;
    }
  }
  return out;
}

size_t least_committed_lane(const std::vector<size_t>& committed, const std::vector<size_t>& limit) {
  size_t best = SIZE_MAX;
  for (size_t i = 0; i < committed.size() && i < limit.size(); ++i)
    if (committed[i] < limit[i] && (best == SIZE_MAX || committed[i] < committed[best])) best = i;
  return best;
}

std::vector<double> rate_weights(const std::vector<double>& gbps) {
  double known = 0;
  for (double x : gbps) known = std::max(known, x);
  std::vector<double> w;
  for (double x : gbps) w.push_back(x > 0 ? x : known > 0 ? known : 1);
  return w;
}

}  // namespace uccl
