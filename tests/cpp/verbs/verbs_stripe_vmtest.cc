// Striping one verbs connection over both Soft-RoCE ports (issue 18, rails item 2), in the
// vm-run VM: each rank may use rxe0 and rxe1 (UCCL_IB_HCA "rxe"), so the connection gets two
// lanes, and the passive side pairs each offered port with its other port (verbs_lanes.h
// match_lanes), so both lanes cross the veth pair: rxe0 -> rxe1 and rxe1 -> rxe0.
// Checked: describe() names both lanes; data is exact at sizes below and above the lane
// threshold, odd ones included (no weight divides them), both ways, plain and reduce receives;
// the devices' packet counters and the veths' byte counters show both ports carried about half
// of a large transfer; a lane that
// fails to connect (on either side) leaves a working one-lane connection that says so.
#include <fstream>
#include <string>
#include <vector>

#include "transports/verbs/verbs_lanes.h"
#include "verbs_vmtest.h"

using namespace uccl;
using namespace vmtest;

namespace {

uint64_t hw_counter(const std::string& dev, const char* name) {
  std::ifstream f("/sys/class/infiniband/" + dev + "/ports/1/hw_counters/" + name);
  uint64_t v = 0;
  f >> v;
  return v;
}

uint64_t net_counter(const std::string& netdev, const char* name) {
  std::ifstream f("/sys/class/net/" + netdev + "/statistics/" + name);
  uint64_t v = 0;
  f >> v;
  return v;
}

bool exchange(Rank& r, size_t n, uint64_t op) {
  std::vector<uint8_t> out(n + 1), in(n + 1, 0xEE);
  fill(out.data(), n, static_cast<uint32_t>(n * 5 + r.rank));
  SendRequest s;
  s.data = out.data(), s.bytes = n, s.env = env(op, 0, n);
  RecvRequest q;
  q.dst = in.data(), q.bytes = n, q.expect = env(op, 0, n);
  r.ep->post_recv(&q);
  r.ep->post_send(&s);
  if (!vmtest::wait_all(r.ep.get(), {&s, &q}, 120)) return false;
  if (!s.error.ok() || !q.error.ok())
    std::fprintf(stderr, "size %zu: %s / %s\n", n, s.error.to_string().c_str(), q.error.to_string().c_str());
  return s.state == ReqState::kDone && q.state == ReqState::kDone &&
         check_fill(in.data(), n, static_cast<uint32_t>(n * 5 + 1 - r.rank)) && in[n] == 0xEE;
}

// float32 sum of both ranks' vectors through reduce receives (scratch registered on both ports).
bool reduce_exchange(Rank& r, size_t count, uint64_t op) {
  std::vector<float> mine(count), acc(count), got(count, -1);
  for (size_t i = 0; i < count; ++i) mine[i] = static_cast<float>((i % 97) + 1000 * r.rank), acc[i] = mine[i];
  SendRequest s;
  s.data = mine.data(), s.bytes = count * 4, s.env = env(op, 0, count);
  RecvRequest q;
  q.dst = got.data(), q.bytes = count * 4, q.expect = env(op, 0, count);
  q.reduce = true, q.acc = acc.data(), q.dtype = DataType::kFloat32, q.op = RedOp::kSum;
  r.ep->post_recv(&q);
  r.ep->post_send(&s);
  if (!vmtest::wait_all(r.ep.get(), {&s, &q}, 120) || s.state != ReqState::kDone || q.state != ReqState::kDone)
    return false;
  for (size_t i = 0; i < count; ++i)
    if (got[i] != static_cast<float>(2 * (i % 97) + 1000)) return false;
  return true;
}

int striped(Rank& r) {
  const std::string d = r.ep->describe();
  INFO(d);
  CHECK(d.find(r.rank == 0 ? "striped over rxe0:1 (to rxe1:1" : "striped over rxe1:1 (to rxe0:1") != std::string::npos);
  CHECK(d.find(r.rank == 0 ? "rxe1:1 (to rxe0:1" : "rxe0:1 (to rxe1:1") != std::string::npos);
  CHECK(d.find("left out") == std::string::npos);
  if (r.rank == 0) std::printf("  %s\n", d.c_str());
  uint64_t op = 0;
  for (size_t n : {size_t{0}, size_t{1}, size_t{8193}, kMinLaneBytes - 1, kMinLaneBytes, size_t{1} << 20,
                   (size_t{1} << 20) + 5, (size_t{3} << 20) + 12345})
    REQUIRE_MESSAGE(exchange(r, n, ++op), "size " << n);
  REQUIRE(reduce_exchange(r, (size_t{1} << 18) + 3, ++op));  // 1 MiB + 12 bytes
  REQUIRE(reduce_exchange(r, 1000, ++op));                   // below the lane threshold

  // One way, rank 0 -> rank 1, 4 MiB: both ports send about half of the data packets.
  const size_t n = size_t{4} << 20;
  std::vector<uint8_t> buf(n);
  fill(buf.data(), n, 99);
  uint64_t before[2] = {hw_counter("rxe0", "sent_pkts"), hw_counter("rxe1", "sent_pkts")};
  uint64_t before_tx[2] = {net_counter("veth0", "tx_bytes"), net_counter("veth1", "tx_bytes")};
  SendRequest s;
  RecvRequest q;
  ++op;
  if (r.rank == 0) {
    s.data = buf.data(), s.bytes = n, s.env = env(op, 0, n);
    r.ep->post_send(&s);
    REQUIRE(vmtest::wait_all(r.ep.get(), {&s}, 120));
    REQUIRE(s.state == ReqState::kDone);
  } else {
    std::fill(buf.begin(), buf.end(), 0);
    q.dst = buf.data(), q.bytes = n, q.expect = env(op, 0, n);
    r.ep->post_recv(&q);
    REQUIRE(vmtest::wait_all(r.ep.get(), {&q}, 120));
    REQUIRE(q.state == ReqState::kDone);
    REQUIRE(check_fill(buf.data(), n, 99));
  }
  if (r.rank == 0) {
    // Lane 0 leaves through veth0 (rxe0), lane 1 through veth1 (rxe1); each carries about half
    // of the 4 MiB (equal rates); the other direction carries only acknowledgements.
    const uint64_t p0 = hw_counter("rxe0", "sent_pkts") - before[0], p1 = hw_counter("rxe1", "sent_pkts") - before[1];
    const uint64_t t0 = net_counter("veth0", "tx_bytes") - before_tx[0];
    const uint64_t t1 = net_counter("veth1", "tx_bytes") - before_tx[1];
    std::printf("  4 MiB one way: rxe0 sent %llu packets, veth0 %llu bytes; rxe1 sent %llu packets, veth1 %llu bytes\n",
                static_cast<unsigned long long>(p0), static_cast<unsigned long long>(t0),
                static_cast<unsigned long long>(p1), static_cast<unsigned long long>(t1));
    CHECK(t0 >= n / 2 * 9 / 10);
    CHECK(t1 >= n / 2 * 9 / 10);
    CHECK(t0 + t1 <= n * 13 / 10);  // headers and acknowledgements, not the data twice
  }
  REQUIRE(exchange(r, 7, ++op));  // still in step afterwards
  return 0;
}

int one_lane_left(Rank& r) {
  uint64_t op = 0;
  REQUIRE(exchange(r, 1, ++op));  // the passive side learns the lanes from READY, the first message
  const std::string d = r.ep->describe();
  INFO(d);
  std::printf("  rank %d: %s\n", r.rank, d.c_str());
  CHECK(d.find("striped") == std::string::npos);
  CHECK(d.find("left out: rxe") != std::string::npos);
  for (size_t n : {size_t{1}, size_t{1} << 20, (size_t{1} << 20) + 5}) REQUIRE_MESSAGE(exchange(r, n, ++op), "size " << n);
  REQUIRE(reduce_exchange(r, (size_t{1} << 18) + 3, ++op));
  return 0;
}

}  // namespace

TEST_CASE("striped over rxe0 and rxe1: exact data, both ports carry it") {
  VerbsOptions o;
  o.qps_per_connection = 1;
  CHECK_MESSAGE(run_checked_pair("rxe", "rxe", o, striped), "1 QP per lane");
  o.qps_per_connection = 2;
  CHECK_MESSAGE(run_checked_pair("rxe", "rxe", o, striped), "2 QPs per lane");
}

TEST_CASE("a lane that fails to connect falls back to the other") {
  VerbsOptions o;
  o.fail_lane_for_testing = 1;
  CHECK_MESSAGE(run_checked_pair("rxe", "rxe", o, one_lane_left, 120, -1, /*fail_lane_rank=*/1), "passive side");
  CHECK_MESSAGE(run_checked_pair("rxe", "rxe", o, one_lane_left, 120, -1, /*fail_lane_rank=*/0), "active side");
  o.fail_lane_for_testing = -1;
  o.stripe = false;  // UCCL_STRIPE_NETWORKS=off: one port, nothing left out
  CHECK(run_checked_pair("rxe", "rxe", o, [](Rank& r) {
    const std::string d = r.ep->describe();
    INFO(d);
    CHECK(d.find("striped") == std::string::npos);
    CHECK(d.find("left out") == std::string::npos);
    return exchange(r, (size_t{1} << 20) + 5, 1) ? 0 : 1;
  }));
}
