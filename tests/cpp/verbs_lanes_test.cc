// The arithmetic of striping a verbs connection over several HCA ports (issue 18, rails item
// 2; transports/verbs/verbs_lanes.h): how ports pair into lanes, how a message is cut over the
// lanes' QPs by the lanes' rates (the weighting helper tcp uses, transports/stripe.h), the
// adaptive striping's bookkeeping on both sides (StripeLoad, AdaptiveCut, expected_imms: a
// simulated pair of lanes of different real speeds checks that every message lands exactly,
// completes only once all of it has, and that the slow lane carries less), and the lanes'
// round trip through the offer/answer text. No RDMA device needed; the data path over real
// ports runs on Soft-RoCE (tests/verbs/run_vm_tests.sh).
#include <algorithm>
#include <cmath>
#include <deque>
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

// Adaptive striping of `sizes` (messages posted together, in order) over lanes that really
// move rate[l] bytes per microsecond, whatever their declared rates, with the bookkeeping of
// verbs_lanes.h on both sides. Each lane serves its writes in posting order (RC keeps a QP's
// writes in order); a write costs 64 bytes more than its payload (headers), so a closing
// immediate costs something too. The sender posts what StripeLoad allows (as the endpoint's
// progress() does, messages in order) and learns each completion when the write has landed.
// The receiver applies each write when its lane delivers it, clears the immediate's bit in
// expected_imms() (an immediate it does not expect fails the test) and, when none is left,
// must hold every byte of the message exactly once.
struct SimResult {
  std::vector<size_t> lane_bytes;  // payload each lane carried
  double end_us = 0;               // when the last message completed at the receiver
  size_t completed = 0;            // messages the receiver completed
};

SimResult simulate(const std::vector<size_t>& sizes, const std::vector<double>& rate, const std::vector<size_t>& qps,
                   size_t chunk, size_t limit) {
  const size_t nl = qps.size(), n = sizes.size();
  SimResult res;
  res.lane_bytes.assign(nl, 0);
  std::vector<size_t> qp_lane;
  for (size_t l = 0; l < nl; ++l)
    for (size_t q = 0; q < qps[l]; ++q) qp_lane.push_back(l);
  struct Write {
    size_t msg;
    LanePiece p;
  };
  std::vector<std::deque<Write>> lane_q(nl);
  std::vector<double> head_done(nl, 0);
  StripeLoad load(qps);
  std::vector<AdaptiveCut> cut(n);
  std::vector<uint64_t> wait(n);
  std::vector<std::map<size_t, size_t>> got(n);  // offset -> bytes, as landed
  std::vector<bool> complete(n, false);
  double now = 0;
  auto cost = [&](size_t l, const LanePiece& p) { return static_cast<double>(p.bytes + 64) / rate[l]; };
  auto enqueue = [&](size_t m, const LanePiece& p) {
    REQUIRE(p.qp < qp_lane.size());
    CHECK(p.lane == qp_lane[p.qp]);
    load.posted(p.qp, p.bytes);
    if (lane_q[p.lane].empty()) head_done[p.lane] = now + cost(p.lane, p);
    lane_q[p.lane].push_back({m, p});
  };
  for (size_t m = 0; m < n; ++m) {
    cut[m].start(sizes[m], chunk, qp_lane.size());
    wait[m] = expected_imms(sizes[m], true, std::vector<double>(nl, 1), qps);
  }
  for (int step = 0; step < 10000000; ++step) {
    for (size_t m = 0; m < n; ++m) {  // the sender
      while (cut[m].data_left()) {
        const size_t qp = load.pick(limit);
        if (qp == SIZE_MAX) break;
        enqueue(m, cut[m].next_chunk(qp, qp_lane[qp]));
      }
      LanePiece p;
      while (cut[m].closing(qp_lane, &p)) {
        CHECK(p.bytes == 0);
        enqueue(m, p);
        cut[m].closed(p.qp);
      }
    }
    size_t l = SIZE_MAX;  // the next event: the lane whose head write lands first
    for (size_t k = 0; k < nl; ++k)
      if (!lane_q[k].empty() && (l == SIZE_MAX || head_done[k] < head_done[l])) l = k;
    if (l == SIZE_MAX) break;
    now = head_done[l];
    const Write w = lane_q[l].front();
    lane_q[l].pop_front();
    if (!lane_q[l].empty()) head_done[l] = now + cost(l, lane_q[l].front().p);
    REQUIRE_FALSE(complete[w.msg]);  // nothing lands after its message completed
    if (w.p.bytes) {
      CHECK(got[w.msg].count(w.p.offset) == 0);
      got[w.msg][w.p.offset] = w.p.bytes;
      res.lane_bytes[l] += w.p.bytes;
    }
    if (w.p.with_imm) {
      REQUIRE_MESSAGE((wait[w.msg] >> w.p.qp & 1), "unexpected immediate on QP " << w.p.qp);
      wait[w.msg] &= ~(uint64_t(1) << w.p.qp);
      if (wait[w.msg] == 0) {  // the receiver completes the message: all of it must be there
        size_t at = 0;
        for (auto& kv : got[w.msg]) {
          CHECK(kv.first == at);
          at += kv.second;
        }
        REQUIRE_MESSAGE(at == sizes[w.msg], "message " << w.msg << " completed with " << at << " of " << sizes[w.msg]);
        complete[w.msg] = true;
        ++res.completed;
        res.end_us = now;
      }
    }
    load.completed(w.p.qp);  // the sender's completion
  }
  for (size_t m = 0; m < n; ++m) CHECK_MESSAGE(cut[m].done(), "message " << m << " not fully posted");
  for (size_t l = 0; l < nl; ++l) CHECK(load.lane_bytes(l) == 0);
  return res;
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

TEST_CASE("expected_imms: adaptive waits for every QP, static for the QPs of the cut") {
  const std::vector<size_t> qps{1, 2};
  const std::vector<double> w{1, 1};
  CHECK(expected_imms(kMinLaneBytes, true, w, qps) == 0b111);
  CHECK(expected_imms(size_t{64} << 20, true, w, qps) == 0b111);
  for (size_t bytes : {size_t{8193}, kMinLaneBytes - 1, kMinLaneBytes, (size_t{3} << 20) + 12345})
    CHECK(expected_imms(bytes, false, w, qps) == imm_mask(lane_pieces(bytes, w, qps)));
  // Below the lane threshold, or over one lane, messages keep the static cut.
  CHECK(expected_imms(kMinLaneBytes - 1, true, w, qps) == imm_mask(lane_pieces(kMinLaneBytes - 1, w, qps)));
  CHECK(expected_imms(size_t{1} << 20, true, {}, {2}) == 0b11);
  CHECK(expected_imms(size_t{1} << 20, true, {1, 1}, {32, 32}) == ~uint64_t(0));
  CHECK(stripes_adaptively(kMinLaneBytes, 2));
  CHECK_FALSE(stripes_adaptively(kMinLaneBytes - 1, 2));
  CHECK_FALSE(stripes_adaptively(size_t{1} << 30, 1));
}

TEST_CASE("StripeLoad: the lane with the fewest bytes in flight below the limit, its emptiest QP") {
  StripeLoad load({1, 2});  // QP 0 on lane 0; QPs 1, 2 on lane 1
  CHECK(load.pick(100) == 0);  // ties: the first lane
  load.posted(0, 60);
  CHECK(load.pick(100) == 1);
  load.posted(1, 30);
  CHECK(load.pick(100) == 2);  // lane 1 (30 < 60), its QP 2 is empty
  load.posted(2, 40);          // lane 1: 70
  CHECK(load.pick(100) == 0);
  load.posted(0, 50);          // lane 0: 110, at its limit
  CHECK(load.pick(100) == 1);  // lane 1 (70), QP 1 (30 < 40)
  load.posted(1, 40);          // lane 1: 110
  CHECK(load.pick(100) == SIZE_MAX);
  CHECK(load.pick(200) == 0);  // a higher limit: both lanes at 110, the first
  // Completions leave a QP oldest first.
  CHECK(load.writes(0) == 2);
  load.completed(0);
  CHECK((load.qp_bytes(0) == 50 && load.lane_bytes(0) == 50));
  CHECK(load.pick(100) == 0);
  load.completed(1);
  CHECK((load.qp_bytes(1) == 40 && load.lane_bytes(1) == 80));
  load.completed(1), load.completed(2), load.completed(0);
  CHECK((load.lane_bytes(0) == 0 && load.lane_bytes(1) == 0 && load.writes(1) == 0));
  load.completed(1);  // nothing posted: no underflow
  CHECK(load.lane_bytes(1) == 0);
}

TEST_CASE("AdaptiveCut: chunks in order, the last with its QP's immediate, then one per other QP") {
  AdaptiveCut c;
  c.start((size_t{1} << 20) + 5, 300000, 3);  // chunk rounded down to 4 KiB: 299008
  CHECK(c.chunk == 299008);
  std::vector<size_t> qp_lane{0, 1, 1};
  LanePiece p;
  CHECK_FALSE(c.closing(qp_lane, &p));  // data first
  size_t at = 0;
  std::vector<LanePiece> ps;
  while (c.data_left()) {
    const bool last = c.last_chunk();
    ps.push_back(c.next_chunk(1, 1));
    CHECK(ps.back().offset == at);
    CHECK(ps.back().with_imm == last);
    at += ps.back().bytes;
  }
  CHECK(at == (size_t{1} << 20) + 5);
  CHECK(ps.size() == 4);
  CHECK(ps.back().bytes == (size_t{1} << 20) + 5 - 3 * 299008);
  CHECK(c.owe_imm == 0b101);  // QP 1 carried the last chunk's immediate
  std::vector<size_t> closing;
  while (c.closing(qp_lane, &p)) {
    CHECK((p.bytes == 0 && p.with_imm && p.lane == qp_lane[p.qp]));
    closing.push_back(p.qp);
    c.closed(p.qp);
  }
  CHECK(closing == std::vector<size_t>{0, 2});
  CHECK(c.done());
  c.start(size_t{1} << 20, 100, 64);  // a chunk below a page is a page; 64 QPs fit the mask
  CHECK((c.chunk == kStripeAlign && c.owe_imm == ~uint64_t(0)));
}

TEST_CASE("adaptive striping, simulated: exact messages, a slow lane carries less, done sooner than static") {
  const std::vector<size_t> sizes{kMinLaneBytes, (size_t{1} << 20) + 5, (size_t{16} << 20) + 4097, (size_t{3} << 20) + 12345};
  // Lane 1 is four times slower than it says (both declare the same rate).
  SimResult r = simulate(sizes, {4, 1}, {1, 1}, 256 << 10, 1 << 20);
  CHECK(r.completed == sizes.size());
  size_t total = 0;
  for (size_t b : sizes) total += b;
  REQUIRE(r.lane_bytes[0] + r.lane_bytes[1] == total);
  const double slow = static_cast<double>(r.lane_bytes[1]) / total;
  MESSAGE("slow lane share " << slow << ", " << r.end_us << " us");
  CHECK(slow > 0.1);
  CHECK(slow < 0.3);  // its fair share is 0.2; the static cut by declared rates gives it 0.5
  // The static cut: each lane's share at its real rate (the receiver waits for the slower).
  double static_us = 0, lane_us[2] = {0, 0};
  for (size_t b : sizes)
    for (const StripePart& sp : weighted_parts(b, {1, 1}, 0)) lane_us[sp.socket] += sp.bytes / (sp.socket ? 1.0 : 4.0);
  static_us = std::max(lane_us[0], lane_us[1]);
  MESSAGE("static " << static_us << " us");
  CHECK(r.end_us < 0.7 * static_us);

  // Equal lanes with several QPs each split about evenly.
  r = simulate({size_t{32} << 20}, {1, 1}, {2, 3}, 256 << 10, 1 << 20);
  CHECK(r.completed == 1);
  CHECK(std::fabs(static_cast<double>(r.lane_bytes[0]) - (16 << 20)) <= (1 << 20));
  // Three lanes, odd chunk and limit, one slow lane, many odd sizes back to back.
  std::vector<size_t> many;
  for (size_t i = 0; i < 12; ++i) many.push_back(kMinLaneBytes + i * 777777);
  r = simulate(many, {2, 2, 0.5}, {1, 2, 1}, 100000, 300000);
  CHECK(r.completed == many.size());
  CHECK(r.lane_bytes[2] * 2 < r.lane_bytes[0]);
  // More QPs than the static cut would use (lane 1's 128 KiB fills 2 of its 4): the receiver
  // still waits for all of them, the sender closes all of them.
  r = simulate({kMinLaneBytes, kMinLaneBytes + 1}, {1, 1}, {1, 4}, 256 << 10, 1 << 20);
  CHECK(r.completed == 2);
  // A chunk larger than the limit: one write per lane at a time; 64 QPs in all.
  r = simulate({(size_t{8} << 20) + 1}, {1, 3}, {32, 32}, 2 << 20, 1 << 20);
  CHECK(r.completed == 1);
  CHECK(r.lane_bytes[0] < r.lane_bytes[1]);
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
  c.adaptive_writer = true;
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
  CHECK(back.value().adaptive_writer);
  REQUIRE(back.value().lanes.size() == 1);
  const VerbsConnInfo& l = *back.value().lanes[0].info;
  CHECK(back.value().lanes[0].index == 1);
  CHECK((l.device == "rxe1:1" && l.gid[15] == 2 && l.gid_index == 1 && l.mtu == 3 && l.gbps == 103.125));
  CHECK((l.qpn == std::vector<uint32_t>{30, 31} && l.psn == std::vector<uint32_t>{7, 8}));
  CHECK(l.fabric == "roce:10.77.0.0/24");

  c.lanes.clear();
  c.gbps = 0;
  c.fabric.clear();
  c.adaptive_writer = false;  // an older build: no "astripe", so it is only sent static CTSs
  CHECK(c.serialize().find("astripe") == std::string::npos);
  auto plain = VerbsConnInfo::parse(c.serialize());
  REQUIRE(plain.ok());
  CHECK((plain.value().lanes.empty() && plain.value().gbps == 0 && plain.value().fabric.empty()));
  CHECK_FALSE(plain.value().adaptive_writer);

  const std::string good = c.serialize();
  for (const char* bad : {" lane1=rxe1:1|roce|0", " lane8=a|roce|0|00000000000000000000000000000000|1|3|1|f|1|1", " lane0=a|roce|0|00000000000000000000000000000000|1|3|1|f|1|1",
                          " lane1=a|xx|0|00000000000000000000000000000000|1|3|1|f|1|1",
                          " lane1=a|roce|0|00000000000000000000000000000000|1|3|-1|f|1|1",
                          " lane1=a|roce|0|00000000000000000000000000000000|1|3|1|f|1,2|1", " gbps=fast",
                          " astripe=yes"}) {
    auto r = VerbsConnInfo::parse(good + bad);
    CHECK(!r.ok());
    CHECK(r.status().code() == Code::kRemoteError);
  }
}

#endif  // UCCL_HAVE_VERBS
