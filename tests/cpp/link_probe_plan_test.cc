// The link probe's plan (topology/link_probe_plan.h) and the measured rates entering the
// Topology: which levels each mode probes, which pairs, declared rates winning, the cache.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "test_util.h"
#include "topology/link_probe_plan.h"
#include "topology/topology.h"

using namespace uccl;

namespace {

// clusters x hosts x ranks-per-host, ranks numbered host by host; rates declared or not.
std::vector<PeerInfo> grid(int clusters, int hosts, int per_host, LinkRates rates = {}) {
  std::vector<PeerInfo> v;
  for (int c = 0; c < clusters; ++c)
    for (int h = 0; h < hosts; ++h)
      for (int l = 0; l < per_host; ++l) {
        PeerInfo p;
        p.rank = static_cast<int>(v.size());
        p.host_id = p.hostname = "c" + std::to_string(c) + "h" + std::to_string(h);
        p.cluster = "c" + std::to_string(c);
        p.listen = {"10.0." + std::to_string(c) + "." + std::to_string(h) + ":" + std::to_string(1000 + l)};
        p.nics = {{"eth0", "tcp", "", p.listen[0], 10, ""}};
        p.rates = rates;
        v.push_back(p);
      }
  return v;
}

}  // namespace

TEST_CASE("probe plan: levels present, pairs, modes") {
  auto t = Topology::build(grid(2, 2, 2));
  auto plan = probe_plan(*t, ProbeMode::kAuto);
  REQUIRE(plan.size() == 3);
  CHECK(plan[0].level == 0);
  CHECK(plan[0].pairs == std::vector<std::pair<int, int>>{{0, 1}});
  CHECK(plan[1].level == 1);
  CHECK(plan[1].pairs == std::vector<std::pair<int, int>>{{0, 2}});
  CHECK(plan[2].level == 2);  // host i of cluster 0 -> host i of cluster 1, concurrently
  CHECK(plan[2].pairs == std::vector<std::pair<int, int>>{{0, 4}, {2, 6}});
  CHECK(plan[0].key != plan[1].key);
  CHECK(probe_plan(*t, ProbeMode::kOff).empty());

  // One level only (one rank per host, one cluster): auto has nothing to decide, on probes it.
  auto flat = Topology::build(grid(1, 3, 1));
  CHECK(probe_plan(*flat, ProbeMode::kAuto).empty());
  REQUIRE(probe_plan(*flat, ProbeMode::kOn).size() == 1);
  CHECK(probe_plan(*Topology::build(grid(1, 1, 1)), ProbeMode::kOn).empty());
}

TEST_CASE("probe plan: declared levels are left out by auto, kept by on") {
  auto t = Topology::build(grid(2, 2, 1, {0, 4, 0}));  // nic declared, uplink not
  auto plan = probe_plan(*t, ProbeMode::kAuto);
  REQUIRE(plan.size() == 1);
  CHECK(plan[0].level == 2);
  CHECK(probe_plan(*t, ProbeMode::kOn).size() == 2);
}

TEST_CASE("measured rates: used where nothing is declared, never over a declaration") {
  const double measured[3] = {5e9 / 8, 0.5e9 / 8, 0.15e9 / 8};
  auto t = Topology::build(grid(2, 2, 2, {0, 4, 0}), measured, "test");
  CHECK(t->rate_source(0) == "measured");
  CHECK(t->rate(0) == doctest::Approx(5e9 / 8));
  CHECK(t->rate_source(1) == "declared");
  CHECK(t->rate(1) == doctest::Approx(4e9 / 8));
  CHECK(t->measured_rate(1) == doctest::Approx(0.5e9 / 8));
  CHECK(t->rate_source(2) == "measured");
  CHECK(t->describe(0).find("probe: test") != std::string::npos);
  auto plain = Topology::build(grid(2, 2, 2));
  CHECK(plain->rate_source(1) == "nic speed");
  CHECK(plain->rate_source(2) == "unknown");
}

TEST_CASE("probe cache: hit within the expiry, miss after it or when disabled") {
  const std::string path = "/tmp/uccl-probe-cache-test-" + std::to_string(getpid());
  std::remove(path.c_str());
  CHECK(probe_cache_lookup(path, "k1", 100) == 0);
  probe_cache_store(path, "k1", 1.5e8);
  probe_cache_store(path, "k2", 2.5e8);
  CHECK(probe_cache_lookup(path, "k1", 100) == doctest::Approx(1.5e8));
  CHECK(probe_cache_lookup(path, "k2", 100) == doctest::Approx(2.5e8));
  CHECK(probe_cache_lookup(path, "k1", 0) == 0);
  FILE* f = fopen(path.c_str(), "a");
  REQUIRE(f);
  fprintf(f, "1000 9e9 k3\n");  // written long ago
  fclose(f);
  CHECK(probe_cache_lookup(path, "k3", 100) == 0);
  std::remove(path.c_str());
}
