// The arithmetic of striping a verbs connection over several HCA ports (issue 18, rails item
// 2; transports/verbs/verbs_lanes.h): how ports pair into lanes, how a message is cut over the
// lanes' QPs by the lanes' rates (the weighting helper tcp uses, transports/stripe.h), and the
// lanes' round trip through the offer/answer text. No RDMA device needed; the data path over
// real ports runs on Soft-RoCE (tests/verbs/run_vm_tests.sh).
#include <algorithm>
#include <cmath>
#include <map>

#include "test_util.h"

#if UCCL_HAVE_VERBS
#include "transports/stripe.h"
#include "transports/verbs/verbs_lanes.h"
#include "transports/verbs/verbs_wire.h"

using namespace uccl;

namespace {

// Every byte covered exactly once, pieces on their lane's QPs, one immediate per used QP and it
// is that QP's last piece; returns the bytes per lane.
std::vector<size_t> check_cover(const std::vector<LanePiece>& ps, size_t bytes, const std::vector<size_t>& qps) {
  std::vector<size_t> base(qps.size(), 0), per_lane(qps.size(), 0);
  for (size_t l = 1; l < qps.size(); ++l) base[l] = base[l - 1] + qps[l - 1];
  std::map<size_t, const LanePiece*> by_off;
  std::map<size_t, int> imms, last_on_qp;
  for (size_t i = 0; i < ps.size(); ++i) {
    const LanePiece& p = ps[i];
    REQUIRE(p.lane < qps.size());
    CHECK(p.qp >= base[p.lane]);
    CHECK(p.qp < base[p.lane] + qps[p.lane]);
    CHECK(p.bytes > 0);
    CHECK(p.bytes <= kMaxWrite);
    CHECK(by_off.count(p.offset) == 0);
    by_off[p.offset] = &p;
    per_lane[p.lane] += p.bytes;
    if (p.with_imm) ++imms[p.qp];
    last_on_qp[p.qp] = static_cast<int>(i);
  }
  size_t at = 0;
  for (auto& kv : by_off) {
    CHECK(kv.first == at);
    at += kv.second->bytes;
  }
  CHECK(at == bytes);
  for (auto& kv : last_on_qp) {
    CHECK(imms[kv.first] == 1);
    CHECK(ps[kv.second].with_imm);
  }
  uint64_t mask = 0;
  for (auto& kv : last_on_qp) mask |= uint64_t(1) << kv.first;
  CHECK(imm_mask(ps) == mask);
  return per_lane;
}

LanePort port(const std::string& name, const std::string& addr, double gbps, const std::string& fabric = "roce:10.77.0.0/24",
              const std::string& ll = "roce") {
  return {name, ll, fabric, addr, gbps};
}

}  // namespace

TEST_CASE("lane_pieces: one lane is the old per-QP stripe plan") {
  auto ps = lane_pieces(1 << 20, {}, {2});
  REQUIRE(ps.size() == 2);
  CHECK((ps[0].qp == 0 && ps[0].offset == 0 && ps[0].bytes == 512 << 10 && ps[0].with_imm));
  CHECK((ps[1].qp == 1 && ps[1].offset == 512 << 10 && ps[1].bytes == 512 << 10 && ps[1].with_imm));
  check_cover(ps, 1 << 20, {2});
  // Below kMinStripe a message stays on one QP; beyond kMaxWrite a QP carries several writes,
  // only its last with the immediate.
  ps = lane_pieces(10000, {}, {4});
  REQUIRE(ps.size() == 1);
  CHECK((ps[0].qp == 0 && ps[0].bytes == 10000 && ps[0].with_imm));
  ps = lane_pieces((size_t{3} << 30) + 1, {}, {1});
  REQUIRE(ps.size() == 4);
  CHECK((!ps[0].with_imm && !ps[2].with_imm && ps[3].with_imm && ps[3].bytes == 1));
  check_cover(ps, (size_t{3} << 30) + 1, {1});
  CHECK(lane_pieces(0, {1, 1}, {1, 1}).empty());
}

TEST_CASE("lane_pieces: small messages stay on lane 0, large ones follow the lanes' rates") {
  auto ps = lane_pieces(kMinLaneBytes - 1, {1, 1}, {1, 1});
  REQUIRE(ps.size() == 1);
  CHECK((ps[0].lane == 0 && ps[0].qp == 0 && ps[0].bytes == kMinLaneBytes - 1));

  // Equal rates, an odd size: halves cut at 4 KiB, the last lane takes the rest.
  const size_t odd = (size_t{3} << 20) + 12345;
  ps = lane_pieces(odd, rate_weights({25, 25}), {1, 1});
  REQUIRE(ps.size() == 2);
  CHECK((ps[0].lane == 0 && ps[1].lane == 1 && ps[1].qp == 1));
  auto per = check_cover(ps, odd, {1, 1});
  CHECK(per[0] % kStripeAlign == 0);
  CHECK(std::fabs(static_cast<double>(per[0]) - odd / 2.0) <= kStripeAlign);

  // Rates 1:3, lane 1 with two QPs (numbered after lane 0's), a size no weight divides.
  const size_t n = (size_t{1} << 20) + 5;
  ps = lane_pieces(n, {1, 3}, {1, 2});
  per = check_cover(ps, n, {1, 2});
  CHECK(per[0] == 256 << 10);
  CHECK(per[1] == n - (256 << 10));
  REQUIRE(ps.size() == 3);
  CHECK((ps[0].lane == 0 && ps[1].lane == 1 && ps[2].lane == 1));  // every lane's first piece first
  CHECK((ps[1].qp == 1 && ps[2].qp == 2));
  CHECK(imm_mask(ps) == 0b111);

  // Three lanes with two QPs each, many sizes: always an exact cover.
  for (size_t bytes : {kMinLaneBytes, kMinLaneBytes + 1, size_t{7} << 20, (size_t{16} << 20) + 4097}) {
    ps = lane_pieces(bytes, {100, 50, 100}, {2, 2, 2});
    per = check_cover(ps, bytes, {2, 2, 2});
    CHECK(per[1] <= per[0]);
  }
}

TEST_CASE("rate_weights: unknown rates weigh like the fastest known one") {
  CHECK(rate_weights({0, 25}) == std::vector<double>{25, 25});
  CHECK(rate_weights({0, 0}) == std::vector<double>{1, 1});
  CHECK(rate_weights({10, 40}) == std::vector<double>{10, 40});
}

TEST_CASE("match_lanes: ports pair on one fabric, each once, another address preferred") {
  // Two ranks of one host with the same two ports (the Soft-RoCE VM): each lane crosses over.
  std::vector<LanePort> both{port("rxe0:1", "A", 10), port("rxe1:1", "B", 10)};
  CHECK(match_lanes(both, both) == std::vector<int>{1, 0});
  // Two hosts: in order.
  std::vector<LanePort> other{port("mlx5_0:1", "C", 10), port("mlx5_1:1", "D", 10)};
  CHECK(match_lanes(both, other) == std::vector<int>{0, 1});
  // A port on another fabric, or of another link layer, pairs with nothing.
  std::vector<LanePort> mixed{port("mlx5_0:1", "C", 10), port("mlx5_1:1", "D", 10, "roce:10.88.0.0/24")};
  CHECK(match_lanes(both, mixed) == std::vector<int>{0, -1});
  std::vector<LanePort> ib{port("mlx5_0:1", "lid 1", 100, "ib:fe80:0000:0000:0000", "ib")};
  CHECK(match_lanes(both, ib) == std::vector<int>{-1, -1});
  // Fewer ports here than offered: the rest is left out.
  CHECK(match_lanes(both, {port("x:1", "C", 10)}) == std::vector<int>{0, -1});
  // A lane below half of lane 0's rate carries nothing (a slow port beside the fabric).
  std::vector<LanePort> slow{port("mlx5_0:1", "C", 100), port("mlx5_1:1", "D", 25)};
  CHECK(match_lanes({port("a:1", "E", 100), port("b:1", "F", 100)}, slow) == std::vector<int>{0, -1});
  CHECK(lane_rate(port("a", "", 0), port("b", "", 40)) == 40);
  CHECK(lane_rate(port("a", "", 100), port("b", "", 40)) == 40);
  // At most kMaxLanes lanes.
  std::vector<LanePort> many;
  for (int i = 0; i < 12; ++i) many.push_back(port("p" + std::to_string(i), std::to_string(i), 10));
  auto m = match_lanes(many, many);
  CHECK(std::count_if(m.begin(), m.end(), [](int x) { return x >= 0; }) == static_cast<long>(kMaxLanes));
}

TEST_CASE("offer/answer: lanes round-trip, rates exactly; a peer without lanes reads as one lane") {
  VerbsConnInfo c;
  c.device = "rxe0:1";
  c.link_layer = "roce";
  c.qpn = {17};
  c.psn = {5};
  c.ctrl_slots = 64;
  c.ctrl_slot_bytes = 8320;
  c.gbps = 1.0 / 3;  // must survive the text exactly: both sides cut messages by it
  c.fabric = "roce:10.77.0.0/24";
  auto lane = std::make_shared<VerbsConnInfo>();
  lane->device = "rxe1:1";
  lane->link_layer = "roce";
  lane->gid[15] = 2;
  lane->gid_index = 1;
  lane->mtu = 3;
  lane->gbps = 103.125;
  lane->fabric = "roce:10.77.0.0/24";
  lane->qpn = {30, 31};
  lane->psn = {7, 8};
  c.lanes.push_back({1, lane});
  auto back = VerbsConnInfo::parse(c.serialize());
  REQUIRE(back.ok());
  CHECK(back.value().gbps == c.gbps);
  CHECK(back.value().fabric == c.fabric);
  REQUIRE(back.value().lanes.size() == 1);
  const VerbsConnInfo& l = *back.value().lanes[0].info;
  CHECK(back.value().lanes[0].index == 1);
  CHECK((l.device == "rxe1:1" && l.gid[15] == 2 && l.gid_index == 1 && l.mtu == 3 && l.gbps == 103.125));
  CHECK((l.qpn == std::vector<uint32_t>{30, 31} && l.psn == std::vector<uint32_t>{7, 8}));
  CHECK(l.fabric == "roce:10.77.0.0/24");

  c.lanes.clear();
  c.gbps = 0;
  c.fabric.clear();
  auto plain = VerbsConnInfo::parse(c.serialize());
  REQUIRE(plain.ok());
  CHECK((plain.value().lanes.empty() && plain.value().gbps == 0 && plain.value().fabric.empty()));

  const std::string good = c.serialize();
  for (const char* bad : {" lane1=rxe1:1|roce|0", " lane8=a|roce|0|00000000000000000000000000000000|1|3|1|f|1|1", " lane0=a|roce|0|00000000000000000000000000000000|1|3|1|f|1|1",
                          " lane1=a|xx|0|00000000000000000000000000000000|1|3|1|f|1|1",
                          " lane1=a|roce|0|00000000000000000000000000000000|1|3|-1|f|1|1",
                          " lane1=a|roce|0|00000000000000000000000000000000|1|3|1|f|1,2|1", " gbps=fast"}) {
    auto r = VerbsConnInfo::parse(good + bad);
    CHECK(!r.ok());
    CHECK(r.status().code() == Code::kRemoteError);
  }
}

#endif  // UCCL_HAVE_VERBS
