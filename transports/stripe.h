// How one message is cut over several lanes of different rates (issue 18, rails item 2): the
// one weighting helper of every transport that stripes over networks or NICs (tcp's sockets
// over subnets, verbs' QPs over HCA ports), so that both cut alike and are tested once.
//
// Why weights from rates and not equal shares: a lane at half the rate of the other would
// otherwise finish last and set the message's time; with shares in proportion to the rates
// every lane finishes at about the same moment.
#pragma once

#include <cstddef>
#include <vector>

namespace uccl {

constexpr size_t kStripeAlign = 4096;  // parts are cut at page boundaries (the last takes the rest)

// Part i goes to lane (first + i) % weights.size() and carries a share of the bytes in
// proportion to that lane's weight, cut at kStripeAlign boundaries (the last part takes the
// rest; empty parts are left out). Returns (lane, offset, length) triples covering [0, bytes).
struct StripePart {
  size_t socket, offset, bytes;  // socket: the lane's index
};
std::vector<StripePart> weighted_parts(size_t bytes, const std::vector<double>& weights, size_t first);

// Weights from lane rates in Gbit/s: an unknown rate (0) weighs as the fastest known one, all
// unknown weigh 1 each.
std::vector<double> rate_weights(const std::vector<double>& gbps);

}  // namespace uccl
