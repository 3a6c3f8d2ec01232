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

// Adaptive striping (tcp, UCCL_TCP_STRIPE=adaptive): a large message is cut into chunks that
// go, one at a time, to the lane with the fewest bytes still on their way (queued by us, or in
// the kernel unsent or unacknowledged), while that is below `limit`. A lane that is slower
// than it says, or busy with someone else's traffic (a rail NIC shared with another job), takes
// its chunks slower and so gets fewer: no rate needs to be known or measured beforehand.
// `limit` is per lane (tcp: two bandwidth-delay products of the lane's path).
// Returns the lane to feed next, or SIZE_MAX when every lane i holds limit[i] or more.
size_t least_committed_lane(const std::vector<size_t>& committed, const std::vector<size_t>& limit);

// Weights from lane rates in Gbit/s: an unknown rate (0) weighs as the fastest known one, all
// unknown weigh 1 each.
std::vector<double> rate_weights(const std::vector<double>& gbps);

}  // namespace uccl
