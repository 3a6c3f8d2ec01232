// The selection table (algorithms/select.h) without any connection: synthetic topologies in,
// algorithm names out. Two checks that behaviour stayed as it was when the table replaced
// pick_algorithm / use_halving_doubling / use_hierarchical:
//   * a readable table of cases the tests and benchmarks exercise, with the expected choice;
//   * a sweep over worlds, layouts, sizes, collectives and forced names comparing the table with
//     the previous rules, written out below as `previous_choice` (the code as it was).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "algorithms/select.h"
#include "topology/cost_model.h"
#include "topology/topology.h"

using namespace uccl;

namespace {

constexpr size_t kSmall = 64 << 10;  // UCCL_SMALL_MSG_BYTES' default

// One PeerInfo per (host, cluster) entry; no declared rates (the defaults apply) unless given.
std::shared_ptr<const Topology> topo(const std::vector<std::pair<std::string, std::string>>& layout,
                                     LinkRates rates = {}) {
  std::vector<PeerInfo> peers;
  for (auto& [host, cluster] : layout) {
    PeerInfo p;
    p.rank = static_cast<int>(peers.size());
    p.host_id = p.hostname = host;
    p.cluster = cluster;
    p.rates = rates;
    peers.push_back(p);
  }
  return Topology::build(peers);
}

// tests/harness.py mixed_hosts: consecutive ranks share a host "a", "b", ...
std::vector<std::pair<std::string, std::string>> mixed(int world, int groups) {
  const int per = std::max(1, (world + groups - 1) / groups);
  std::vector<std::pair<std::string, std::string>> v;
  for (int r = 0; r < world; ++r) v.push_back({std::string(1, static_cast<char>('a' + r / per)), ""});
  return v;
}
std::vector<std::pair<std::string, std::string>> one_host(int world) { return mixed(world, 1); }
// clusters x hosts x ranks per host (tests/topo GRID is grid(2, 2, 2)).
std::vector<std::pair<std::string, std::string>> grid(int clusters, int hosts, int per) {
  std::vector<std::pair<std::string, std::string>> v;
  for (int c = 0; c < clusters; ++c)
    for (int h = 0; h < hosts; ++h)
      for (int l = 0; l < per; ++l) v.push_back({"c" + std::to_string(c) + "h" + std::to_string(h), "c" + std::to_string(c)});
  return v;
}

std::string choose(Collective coll, size_t bytes, const Topology* t, int size, Algorithm forced = Algorithm::kAuto,
                   size_t small = kSmall) {
  SelectRequest r;
  r.coll = coll;
  r.bytes = bytes;
  r.size = size;
  r.topo = t;
  r.forced = forced;
  r.small_msg_bytes = small;
  return algorithm_name(select_algorithm(r).algo);
}

// The rules before the table (blocks.cc pick_algorithm, reductions.cc use_halving_doubling,
// hierarchical.cc use_hierarchical, the builders' special cases), kept here as the reference.
std::string previous_choice(Collective coll, size_t bytes, const Topology* t, int n, Algorithm forced, size_t small) {
  // Since issue 18: an all_reduce of more than two ranks is latency-bound up to small / (n - 1).
  if (coll == Collective::kAllReduce && n > 2) small /= static_cast<size_t>(n - 1);
  auto pick = [&] {
    if (forced == Algorithm::kRing) return std::string("ring");
    if (forced == Algorithm::kDirect) return std::string("direct");
    return std::string(bytes <= small ? "direct" : "ring");
  };
  auto hier = [&] {
    if (!t || n < 2) return false;
    if (forced != Algorithm::kHier && forced != Algorithm::kAuto) return false;
    if (!t->hierarchical()) return false;
    if (forced == Algorithm::kHier) return true;
    if (bytes <= small) return false;
    const CostOp op = coll == Collective::kAllReduce       ? CostOp::kAllReduce
                      : coll == Collective::kReduceScatter ? CostOp::kReduceScatter
                                                           : CostOp::kAllGather;
    return predict_hierarchical(*t, op, static_cast<double>(bytes)) < predict_flat_ring(*t, op, static_cast<double>(bytes));
  };
  switch (coll) {
    case Collective::kAllReduce: {
      if (hier()) return "hier";
      if (n == 1) return "local";
      std::string a = pick();
      // Since issue 18's two-shot: from 32 MiB on one host of 3+ ranks.
      if (forced == Algorithm::kAuto && a == "ring" && n >= 3 && t && t->num_hosts() == 1 && bytes >= (32u << 20))
        return "twoshot";
      const bool pow2 = (n & (n - 1)) == 0;
      if (pow2 && (forced == Algorithm::kHalvingDoubling ||
                   (forced == Algorithm::kAuto && n >= 4 && a == "ring" && t && t->num_hosts() == 1)))
        a = "rhd";
      return a;
    }
    case Collective::kReduceScatter: {
      if (hier()) return "hier";
      if (n == 1) return "local";
      const std::string a = pick();
      return forced == Algorithm::kAuto && a == "ring" && n >= 3 && t && t->num_hosts() == 1 ? "twoshot" : a;
    }
    case Collective::kAllGather:
      if (hier()) return "hier";
      return n == 1 ? "local" : pick();
    case Collective::kReduce: return n == 1 ? "local" : pick();
    case Collective::kBroadcast: return n == 1 ? "local" : n == 2 ? "direct" : pick();
    case Collective::kAllToAll: return n == 1 ? "local" : "direct";
    case Collective::kGather:
    case Collective::kScatter: return "direct";
    case Collective::kBarrier: return "dissemination";
    default: return "?";
  }
}

}  // namespace

TEST_CASE("the table reproduces the cases the tests and benchmarks exercise") {
  struct Case {
    std::string what;
    Collective coll;
    size_t bytes;
    std::shared_ptr<const Topology> t;
    Algorithm forced;
    std::string want;
  };
  const auto h1 = topo(one_host(1)), h2 = topo(one_host(2)), h3 = topo(one_host(3)), h4 = topo(one_host(4)),
             h8 = topo(one_host(8)), m4 = topo(mixed(4, 2)), m8 = topo(mixed(8, 2)), g222 = topo(grid(2, 2, 2));
  // The testbed's shaped grid: 0.5 Gbit/s between clusters, 4 inside, 40 on a host.
  const auto slow = topo(grid(2, 2, 2), {40, 4, 0.5});
  const Algorithm A = Algorithm::kAuto;
  const std::vector<Case> cases = {
      {"one rank", Collective::kAllReduce, 1 << 20, h1, A, "local"},
      {"one rank, ring forced", Collective::kAllReduce, 1 << 20, h1, Algorithm::kRing, "local"},
      {"small all_reduce", Collective::kAllReduce, 16, h4, A, "direct"},
      {"at UCCL_SMALL_MSG_BYTES, 2 ranks", Collective::kAllReduce, kSmall, h2, A, "direct"},
      {"at UCCL_SMALL_MSG_BYTES / 3, 4 ranks", Collective::kAllReduce, kSmall / 3, h4, A, "direct"},
      {"just above it", Collective::kAllReduce, kSmall / 3 + 1, h4, A, "rhd"},
      {"all_gather keeps the whole threshold", Collective::kAllGather, kSmall, h4, A, "direct"},
      {"4 ranks one host: rhd (measured)", Collective::kAllReduce, 1 << 18, h4, A, "rhd"},
      {"8 ranks one host", Collective::kAllReduce, 16 << 20, h8, A, "rhd"},
      {"3 ranks: not a power of two", Collective::kAllReduce, 1 << 20, h3, A, "ring"},
      {"4 ranks one host, 32 MiB: two-shot (2 phases vs rhd's 4)", Collective::kAllReduce, 32 << 20, h4, A, "twoshot"},
      {"3 ranks one host, 64 MiB", Collective::kAllReduce, 64 << 20, h3, A, "twoshot"},
      {"2 ranks: ring (same steps as rhd and two-shot)", Collective::kAllReduce, 64 << 20, h2, A, "ring"},
      {"reduce_scatter, 4 ranks one host", Collective::kReduceScatter, 1 << 20, h4, A, "twoshot"},
      {"reduce_scatter, 2 ranks", Collective::kReduceScatter, 1 << 20, h2, A, "ring"},
      {"two-shot avoided across hosts", Collective::kReduceScatter, 1 << 20, topo(mixed(4, 4)), A, "ring"},
      {"two-shot forced across hosts", Collective::kAllReduce, 1 << 20, m8, Algorithm::kTwoShot, "twoshot"},
      {"two-shot forced, small", Collective::kAllReduce, 16, h4, Algorithm::kTwoShot, "twoshot"},
      {"two-shot forced on all_gather: plain choice", Collective::kAllGather, 1 << 20, h4, Algorithm::kTwoShot, "ring"},
      {"two hosts of two ranks: hier (cost model)", Collective::kAllReduce, 1 << 20, m4, A, "hier"},
      {"four hosts of one rank: the ring, not rhd", Collective::kAllReduce, 1 << 20, topo(mixed(4, 4)), A, "ring"},
      {"rhd forced across hosts", Collective::kAllReduce, 1 << 20, m8, Algorithm::kHalvingDoubling, "rhd"},
      {"rhd forced, small", Collective::kAllReduce, 16, h4, Algorithm::kHalvingDoubling, "rhd"},
      {"rhd forced on 3 ranks: plain choice", Collective::kAllReduce, 1 << 20, h3, Algorithm::kHalvingDoubling, "ring"},
      {"rhd forced on 4 ranks", Collective::kAllReduce, 1 << 20, h4, Algorithm::kHalvingDoubling, "rhd"},
      {"rhd forced on reduce_scatter", Collective::kReduceScatter, 16, h4, Algorithm::kHalvingDoubling, "direct"},
      {"direct forced, large", Collective::kAllReduce, 1 << 20, h4, Algorithm::kDirect, "direct"},
      {"ring forced, small", Collective::kAllReduce, 16, h4, Algorithm::kRing, "ring"},
      {"hier forced on one host: plain choice", Collective::kAllReduce, 1 << 20, h4, Algorithm::kHier, "ring"},
      {"hier forced, small", Collective::kAllGather, 16, g222, Algorithm::kHier, "hier"},
      {"slow uplink: hier all_gather", Collective::kAllGather, 8 << 20, slow, A, "hier"},
      {"slow uplink: hier all_reduce", Collective::kAllReduce, 8 << 20, slow, A, "hier"},
      {"slow uplink: hier reduce_scatter", Collective::kReduceScatter, 8 << 20, slow, A, "hier"},
      {"slow uplink, small: direct", Collective::kAllReduce, 1024, slow, A, "direct"},
      {"no topology: ring", Collective::kAllReduce, 1 << 20, nullptr, A, "ring"},
      {"broadcast to 2 ranks", Collective::kBroadcast, 1 << 20, h2, A, "direct"},
      {"broadcast to 2 ranks, ring forced", Collective::kBroadcast, 1 << 20, h2, Algorithm::kRing, "direct"},
      {"broadcast to 3 ranks", Collective::kBroadcast, 1 << 20, h3, A, "ring"},
      {"reduce, large", Collective::kReduce, 1 << 20, h4, A, "ring"},
      {"all_to_all, ring forced", Collective::kAllToAll, 1 << 20, h4, Algorithm::kRing, "direct"},
      {"all_to_all, one rank", Collective::kAllToAll, 64, h1, A, "local"},
      {"gather, one rank", Collective::kGather, 64, h1, A, "direct"},
      {"barrier", Collective::kBarrier, 0, h4, A, "dissemination"},
      {"all_gather_v like all_gather", Collective::kAllGatherV, 1 << 20, h4, A, "ring"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    CHECK(choose(c.coll, c.bytes, c.t.get(), c.t ? c.t->size() : 4, c.forced) == c.want);
  }
}

TEST_CASE("the table agrees with the previous rules everywhere") {
  std::vector<std::shared_ptr<const Topology>> topos;
  for (int w : {1, 2, 3, 4, 5, 8, 16}) {
    topos.push_back(topo(one_host(w)));
    for (int g : {2, 3}) topos.push_back(topo(mixed(w, g)));
  }
  topos.push_back(topo(grid(2, 2, 2)));
  topos.push_back(topo(grid(2, 2, 2), {40, 4, 0.5}));
  topos.push_back(topo(grid(2, 2, 2), {4, 4, 0}));
  topos.push_back(topo(grid(3, 2, 4), {400, 100, 10}));
  topos.push_back(topo(grid(1, 4, 2), {80, 1, 0}));
  std::vector<std::pair<std::string, std::string>> uneven = {{"a", "c0"}, {"a", "c0"}, {"a", "c0"}, {"b", "c0"},
                                                             {"b", "c0"}, {"c", "c1"}, {"c", "c1"}, {"c", "c1"},
                                                             {"d", "c1"}, {"d", "c1"}};
  topos.push_back(topo(uneven, {40, 4, 0.5}));
  const Collective colls[] = {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                              Collective::kBroadcast, Collective::kReduce,    Collective::kAllToAll,
                              Collective::kGather,    Collective::kScatter,   Collective::kBarrier};
  const Algorithm forced[] = {Algorithm::kAuto, Algorithm::kRing, Algorithm::kDirect, Algorithm::kHier,
                              Algorithm::kHalvingDoubling};
  int checked = 0;
  for (auto& t : topos)
    for (Collective c : colls)
      for (Algorithm f : forced)
        for (size_t small : {size_t(0), kSmall, size_t(1) << 20})
          for (size_t bytes : {size_t(0), size_t(16), kSmall, kSmall + 1, size_t(1) << 18, size_t(1) << 20,
                               size_t(16) << 20, size_t(256) << 20}) {
            for (const Topology* tp : {t.get(), static_cast<const Topology*>(nullptr)}) {
              CAPTURE(t->describe(-1));
              CAPTURE(collective_name(c));
              CAPTURE(algorithm_name(f));
              CAPTURE(bytes);
              CAPTURE(small);
              CHECK(choose(c, bytes, tp, t->size(), f, small) == previous_choice(c, bytes, tp, t->size(), f, small));
              ++checked;
            }
          }
  CHECK(checked > 10000);
}

TEST_CASE("names: enum in, enum out; unknown names refused") {
  for (const char* n : {"ring", "direct", "rhd", "hier", "twoshot"}) {
    auto a = parse_algorithm(n);
    REQUIRE(a.ok());
    CHECK(std::string(algorithm_name(a.value())) == n);
  }
  CHECK(parse_algorithm("hierarchical").value() == Algorithm::kHier);
  CHECK(parse_algorithm("").value() == Algorithm::kAuto);
  CHECK(parse_algorithm("auto").value() == Algorithm::kAuto);
  for (const char* bad : {"rng", "local", "dissemination", "RING", " ring"}) {
    auto a = parse_algorithm(bad);
    CHECK(!a.ok());
    CHECK(a.status().code() == Code::kInvalidArgument);
  }
}

TEST_CASE("the collectives whose choice reads the topology") {
  for (Collective c : {Collective::kAllReduce, Collective::kAllGather, Collective::kAllGatherV,
                       Collective::kReduceScatter, Collective::kReduceScatterV})
    CHECK(needs_topology(c));
  for (Collective c : {Collective::kBroadcast, Collective::kReduce, Collective::kAllToAll, Collective::kAllToAllV,
                       Collective::kGather, Collective::kScatter, Collective::kBarrier, Collective::kSendRecv})
    CHECK(!needs_topology(c));
}

TEST_CASE("the reason names every candidate with its predicted cost, and why the others are out") {
  auto t = topo(one_host(4));
  SelectRequest r;
  r.coll = Collective::kAllReduce;
  r.bytes = 1 << 20;
  r.size = 4;
  r.topo = t.get();
  r.small_msg_bytes = kSmall;
  const Selection s = select_algorithm(r);
  CHECK(s.algo == Algorithm::kHalvingDoubling);
  CHECK(s.cost > 0);
  INFO(s.reason);
  CHECK(s.reason.find("rhd predicted") != std::string::npos);
  CHECK(s.reason.find("ring ") != std::string::npos);
  CHECK(s.reason.find("twoshot") != std::string::npos);  // avoided below 32 MiB, with why
  CHECK(s.reason.find("below 32 MiB") != std::string::npos);
  CHECK(s.reason.find("UCCL_SMALL_MSG_BYTES") != std::string::npos);  // why not direct
  CHECK(s.reason.find("hier (the hierarchy is flat") != std::string::npos);
  // The chosen one is the cheapest of those that compete.
  for (const Candidate& c : s.candidates)
    if (!c.avoided) CHECK(c.cost >= s.cost);
  // predict_algorithm: the same numbers, and a refusal says why.
  CHECK(predict_algorithm(r, Algorithm::kAuto).value() == s.cost);
  CHECK(predict_algorithm(r, Algorithm::kRing).value() > s.cost);
  auto h = predict_algorithm(r, Algorithm::kHier);
  CHECK(!h.ok());
  CHECK(h.status().message().find("flat") != std::string::npos);
}

TEST_CASE("cost model: every algorithm has a latency term and the bandwidth terms it should") {
  auto t = topo(one_host(4), {80, 10, 0});  // 10 GB/s per rank on the host
  const double B = 80e9 / 8, D = 64.0 * (1 << 20);
  // ring all_gather: 3 steps of D/4; rhd all_reduce: the same bytes as the ring in fewer steps.
  const double ring_ag = predict_flat_ring(*t, CostOp::kAllGather, D);
  CHECK(ring_ag == doctest::Approx(3 * (D / 4 / B + 5e-6)));
  const double ring_ar = predict_flat_ring(*t, CostOp::kAllReduce, D);
  const double rhd_ar = predict_halving_doubling(*t, CostOp::kAllReduce, D);
  CHECK(rhd_ar < ring_ar);
  CHECK(ring_ar - rhd_ar == doctest::Approx(2 * 5e-6));  // 6 phases vs 4, equal bytes
  // two-shot: the same bytes again in 2 phases; its reduce_scatter is direct's (one phase).
  CHECK(rhd_ar - predict_two_shot(*t, CostOp::kAllReduce, D) == doctest::Approx(2 * 5e-6));
  CHECK(predict_two_shot(*t, CostOp::kReduceScatter, D) == doctest::Approx(predict_direct(*t, CostOp::kReduceScatter, D)));
  CHECK(predict_two_shot(*t, CostOp::kAllGather, D) < 0);  // no such schedule
  // direct all_gather: one phase, each rank's share split over 3 flows.
  CHECK(predict_direct(*t, CostOp::kAllGather, D) == doctest::Approx(3 * D / 4 / B + 5e-6));
  // empty messages still cost the latency: barrier of 4 ranks = 2 rounds
  CHECK(predict_dissemination(*t) == doctest::Approx(2 * 5e-6));
  CHECK(predict_p2p(*t, 0, 1, D) == doctest::Approx(D / B + 5e-6));
  CHECK(predict_hierarchical(*t, CostOp::kBroadcast, D) < 0);  // no such schedule
}

TEST_CASE("the memo and the fast path give the table's choice") {
  auto t = topo(grid(2, 2, 2), {40, 4, 0.5});
  SelectionMemo memo;
  for (int round = 0; round < 2; ++round)
    for (Collective c : {Collective::kAllReduce, Collective::kAllGather, Collective::kBroadcast})
      for (size_t bytes : {size_t(16), size_t(1) << 20, size_t(64) << 20}) {
        SelectRequest r;
        r.coll = c;
        r.bytes = bytes;
        r.size = t->size();
        r.topo = t.get();
        r.small_msg_bytes = kSmall;
        bool fresh = false;
        CHECK(memo.choose(r, &fresh) == select_algorithm(r).algo);
        if (round == 0) CHECK(fresh);
        CHECK(memo.choose(r, &fresh) == select_algorithm(r).algo);
        CHECK(!fresh);  // the same request again: remembered
        CHECK(choose_fast(r) == select_algorithm(r).algo);
      }
}
