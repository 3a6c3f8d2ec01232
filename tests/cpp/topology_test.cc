// Topology without a network: file parsing (JSON, YAML), levels/rails/grid from
// synthetic PeerInfos (even and uneven), path choice per peer pair, the cost model.
#include <cmath>
#include <string>

#include "test_util.h"
#include "topology/cost_model.h"
#include "topology/local_host.h"
#include "transports/path_choice.h"
#include "transports/registry.h"
#include "topology/topo_value.h"
#include "topology/topology.h"

using namespace uccl;

namespace {

PeerInfo peer(int rank, const std::string& host, const std::string& cluster, double nic_gbps = 4) {
  PeerInfo p;
  p.rank = rank;
  p.host_id = host;
  p.hostname = host;
  p.cluster = cluster;
  p.listen = {"10.0.0." + std::to_string(rank) + ":1000"};
  p.nics = {{"eth0", "tcp", cluster, p.listen[0], nic_gbps, ""}};
  p.rates = {40, 4, 0.5};
  return p;
}

// clusters x hosts x ranks-per-host, ranks numbered host by host.
std::vector<PeerInfo> grid(int clusters, int hosts, int per_host) {
  std::vector<PeerInfo> v;
  for (int c = 0; c < clusters; ++c)
    for (int h = 0; h < hosts; ++h)
      for (int l = 0; l < per_host; ++l)
        v.push_back(peer(static_cast<int>(v.size()), "c" + std::to_string(c) + "h" + std::to_string(h),
                         "c" + std::to_string(c)));
  return v;
}

TEST_CASE("topology documents: JSON and YAML parse; a document applies to its host") {
  auto j = parse_json(R"({"a": [1, 2.5, "x"], "b": {"c": true, "d": null}})");
  REQUIRE(j.ok());
  REQUIRE((j.value().get("a")->list.size() == 3 && j.value().get("a")->list[1].num == 2.5));
  CHECK(j.value().get("b")->get("c")->b);
  CHECK(!parse_json("{\"a\": }").ok());
  CHECK(!parse_json("{\"a\": 1} x").ok());

  const char* yaml = R"(# comment
inter_cluster_gbps: 0.5
clusters:
  - name: c0
    nic_gbps: 4   # trailing comment
    hosts:
      - name: node-a
        addresses: [10.210.1.1, "10.210.1.9"]
        nics:
          - {name: mlx5_0, kind: ib, fabric: ib0, gbps: 200}
      - node-b
  - name: c1
    hosts:
    - name: node-c
)";
  auto y = parse_yaml(yaml);
  REQUIRE_OK(y.status());
  const TopoValue& d = y.value();
  CHECK(d.get("inter_cluster_gbps")->num == 0.5);
  auto& cl = d.get("clusters")->list;
  REQUIRE(cl.size() == 2);
  CHECK((cl[0].get("name")->str == "c0" && cl[0].get("nic_gbps")->num == 4));
  auto& hosts = cl[0].get("hosts")->list;
  REQUIRE((hosts.size() == 2 && hosts[1].str == "node-b"));
  CHECK(hosts[0].get("addresses")->list[1].str == "10.210.1.9");
  CHECK(hosts[0].get("nics")->list[0].get("gbps")->num == 200);
  CHECK(cl[1].get("hosts")->list[0].get("name")->str == "node-c");
  CHECK(!parse_yaml("a: 1\n   b: 2\n").ok());  // bad indentation is an error, not a guess
  // Errors say where (the libraries give line and column); quoted scalars stay strings.
  auto bad_yaml = parse_yaml("a: [1, 2\nb: 3\n");
  REQUIRE(!bad_yaml.ok());
  CHECK(bad_yaml.status().code() == Code::kInvalidArgument);
  CHECK(bad_yaml.status().message().find("line") != std::string::npos);
  auto bad_json = parse_json("{\"a\": }");
  REQUIRE(!bad_json.ok());
  CHECK(bad_json.status().message().find("line 1") != std::string::npos);
  auto quoted = parse_yaml("name: \"42\"\nrate: 42\n");
  REQUIRE(quoted.ok());
  CHECK(quoted.value().get("name")->kind == TopoValue::Kind::kString);
  CHECK(quoted.value().get("rate")->kind == TopoValue::Kind::kNumber);

  // Applying the document: match by address, pick up cluster, fabric and rates.
  PeerInfo me = peer(0, "somewhere", "");
  me.nics = {{"eth0", "tcp", "", "10.210.1.9:4000", 0, ""}, {"mlx5_0:1", "ib", "", "fe80::1", 100, ""}};
  auto m = apply_topology_doc(d, "id", &me);
  REQUIRE((m.ok() && m.value()));
  CHECK(me.cluster == "c0");
  CHECK((me.rates.nic_gbps == 4 && me.rates.uplink_gbps == 0.5));
  CHECK((me.nics[1].fabric == "ib0" && me.nics[1].gbps == 200));
  CHECK(me.nics[0].fabric == "c0");
  PeerInfo other = peer(1, "elsewhere", "");
  other.nics[0].address = "192.168.0.1:1";
  auto m2 = apply_topology_doc(d, "id", &other);
  REQUIRE((m2.ok() && !m2.value()));

  // The PeerInfo round trip keeps the rates.
  auto back = PeerInfo::parse(me.serialize());
  REQUIRE((back.ok() && back.value().rates.uplink_gbps == 0.5 && back.value().nics.size() == 2));
}

TEST_CASE("levels, rails and grid from synthetic hosts") {
  auto t = Topology::build(grid(2, 2, 2));
  CHECK((t->num_hosts() == 4 && t->num_clusters() == 2));
  CHECK((t->hierarchical() && t->dims() == std::vector<int>({2, 2, 2})));
  CHECK((t->level(0, 1) == 0 && t->level(0, 2) == 1 && t->level(0, 4) == 2));
  CHECK(t->rail(0) == std::vector<int>({0, 2, 4, 6}));
  CHECK((t->coord(5, 0) == 1 && t->coord(5, 1) == 0 && t->coord(5, 2) == 1));
  CHECK(t->neighbor(5, 2, 0) == 1);
  CHECK(t->chunk(0, 2, 1) == std::vector<int>({4}));
  CHECK(t->chunk(0, 0, 1) == std::vector<int>({1, 3, 5, 7}));
  // nested_index: every chunk is a contiguous range of indices.
  for (int r = 0; r < 8; ++r)
    for (int d = 0; d < 3; ++d)
      for (int v = 0; v < 2; ++v) {
        auto ch = t->chunk(r, d, v);
        int lo = 99, hi = -1;
        for (int q : ch) lo = std::min(lo, t->nested_index(q)), hi = std::max(hi, t->nested_index(q));
        CHECK(hi - lo + 1 == static_cast<int>(ch.size()));
      }

  // Uneven hosts (3 + 2 ranks) in each of two clusters: no host rails, but clusters are
  // even (5 ranks each): the grid keeps the cluster level.
  std::vector<PeerInfo> u;
  const char* hosts[] = {"a", "a", "a", "b", "b", "c", "c", "c", "d", "d"};
  for (int r = 0; r < 10; ++r) u.push_back(peer(r, hosts[r], r < 5 ? "c0" : "c1"));
  auto tu = Topology::build(u);
  CHECK((tu->hierarchical() && tu->dims() == std::vector<int>({5, 2})));
  // One cluster, hosts of 3 and 2: flat.
  u.resize(5);
  auto tf = Topology::build(u);
  CHECK(!tf->hierarchical());
  CHECK(tf->flat_reason().find("uneven") != std::string::npos);
  // Clusters of different sizes (2 hosts vs 1) with even hosts: the host level survives.
  auto g = grid(2, 2, 2);
  g.resize(6);
  auto th = Topology::build(g);
  CHECK((th->hierarchical() && th->dims() == std::vector<int>({2, 3})));
  // One rank per host, one cluster: a single level.
  CHECK(!Topology::build(grid(1, 4, 1))->hierarchical());
  // Ranks interleaved across hosts (rank r on host r % 2): coordinates follow hosts, not ranks.
  std::vector<PeerInfo> il;
  for (int r = 0; r < 4; ++r) il.push_back(peer(r, r % 2 ? "y" : "x", "c0"));
  auto ti = Topology::build(il);
  CHECK((ti->hierarchical() && ti->host_of(2) == 0 && ti->local_rank(2) == 1));
}

TEST_CASE("path choice per pair of peers") {
  PeerInfo a = peer(0, "h0", "c0"), b = peer(1, "h1", "c0"), c = peer(2, "h2", "c1");
  CHECK(choose_path(a, a).kind == TransportKind::kShm);
  CHECK((choose_path(a, b).kind == TransportKind::kTcp && choose_path(a, b).fabric == "c0"));
  CHECK(choose_path(a, c).fabric.empty());
  // Two addresses on the peer: the one on our fabric first, even when listed second.
  b.listen = {"192.168.0.2:1", "10.1.0.2:1"};
  b.nics = {{"eth1", "tcp", "office", "192.168.0.2:1", 10, ""}, {"ib0", "tcp", "c0", "10.1.0.2:1", 100, ""}};
  auto pc = choose_path(a, b);
  REQUIRE((pc.peer_addresses.size() == 2 && pc.peer_addresses[0] == "10.1.0.2:1"));
  // RDMA: same kind and fabric, and only when verbs is usable; IB and RoCE never pair.
  a.nics.push_back({"mlx5_0:1", "ib", "ibA", "gid", 200, ""});
  b.nics.push_back({"mlx5_1:1", "ib", "ibA", "gid", 100, ""});
  c.nics.push_back({"mlx5_0:1", "roce", "ibA", "gid", 100, ""});
  if (const TransportEntry* verbs = find_transport("verbs")) {  // verbs' own rule
    CHECK((verbs->can_connect(a, b).ok && verbs->can_connect(a, b).my_nic == "mlx5_0:1"));
    CHECK(!verbs->can_connect(a, c).ok);
    std::string why;
    CHECK(choose_path(a, b).kind == (verbs->available(&why) ? TransportKind::kVerbs : TransportKind::kTcp));
  }
  CHECK(choose_path(a, c).kind == TransportKind::kTcp);
  // Forced lists: the order given, unknown names refused, nothing left is NotSupported.
  auto forced = path_candidates(a, a, "tcp,shm");
  CHECK((forced.ok() && forced.value().size() == 2 && forced.value()[0].kind == TransportKind::kTcp));
  CHECK(path_candidates(a, b, "bogus").status().code() == Code::kInvalidArgument);
  CHECK(path_candidates(a, c, "shm").status().code() == Code::kNotSupported);
}

TEST_CASE("stripe lanes: common subnets, the same list from both ends, slow networks left out") {
  PeerInfo a = peer(0, "h0", "c0"), b = peer(1, "h1", "c0");
  CHECK(stripe_lanes(a, b).empty());  // no subnets known: one network
  auto two_nics = [](PeerInfo& p, int host, double g1) {
    p.listen = {"10.210.1." + std::to_string(host) + ":7", "10.211.1." + std::to_string(host) + ":8"};
    p.nics = {{"eth0", "tcp", "c0", p.listen[0], 10, "10.210.1.0/24"}, {"eth1", "tcp", "c0", p.listen[1], g1, "10.211.1.0/24"}};
  };
  two_nics(a, 1, 10);
  two_nics(b, 2, 25);
  auto ab = stripe_lanes(a, b), ba = stripe_lanes(b, a);
  REQUIRE((ab.size() == 2 && ba.size() == 2));
  CHECK((ab[0].network == "10.210.1.0/24" && ab[0].peer_address == "10.210.1.2:7" && ab[0].my_nic == "eth0"));
  CHECK((ab[1].network == "10.211.1.0/24" && ab[1].peer_address == "10.211.1.2:8" && ab[1].gbps == 10));
  CHECK((ba[0].network == ab[0].network && ba[1].network == ab[1].network));
  // pair_lanes takes the lower rank's view on both ends.
  auto pa = pair_lanes(a, b), pb = pair_lanes(b, a);
  REQUIRE((pa.size() == 2 && pb.size() == 2));
  CHECK((pa[0].peer_address == pb[0].peer_address && pa[1].peer_address == pb[1].peer_address));
  // A 1 Gbit/s management network beside 10 Gbit/s carries nothing: one lane left = none.
  two_nics(a, 1, 1);
  CHECK(stripe_lanes(a, b).empty());
  // The peer listens on one of the subnets only: nothing to stripe over.
  two_nics(a, 1, 10);
  b.listen.pop_back();
  CHECK(stripe_lanes(a, b).empty());
  // PeerInfo carries the subnet.
  auto back = PeerInfo::parse(a.serialize());
  REQUIRE_OK(back.status());
  CHECK(back.value().nics[1].network == "10.211.1.0/24");
}

TEST_CASE("cost model: hierarchical against flat ring") {
  auto t = Topology::build(grid(2, 2, 2));  // host 40, nic 4, uplink 0.5 Gbit/s
  const double D = 256.0 * (1 << 20);
  const double hier = predict_hierarchical(*t, CostOp::kAllGather, D);
  const double ring = predict_flat_ring(*t, CostOp::kAllGather, D);
  CHECK(hier < ring);
  // Dominant term: the slow level carries (y-1)D/(x y) per rank over a 1/x share of the
  // uplink (x = 4 ranks per cluster): (y-1) D / (y C_uplink) = D / (2 * 62.5 MB/s).
  const double slow = D / 2 / (0.5e9 / 8);
  CHECK((hier > slow && hier < slow * 1.4));
  // The flat ring crosses the slow link once per direction per step: (n-1)/n D / C_uplink.
  CHECK(std::fabs(ring / (7.0 / 8 * D / (0.5e9 / 8)) - 1) < 0.05);
  // Homogeneous links with no slow uplink: flat ring wins (hier shares host NICs).
  auto g = grid(2, 2, 2);
  for (auto& p : g) p.rates = {4, 4, 0};
  auto th = Topology::build(g);
  CHECK(predict_flat_ring(*th, CostOp::kAllReduce, D) < predict_hierarchical(*th, CostOp::kAllReduce, D));
}

TEST_CASE("the testbed's example topology file parses and applies") {
  // The example shipped with the testbed parses and applies (a host matched by name).
  // The source tree from CMake: __FILE__ may be relative to the build directory (ccache's
  // base_dir rewrites absolute paths), and ctest runs the test elsewhere.
  std::string path = std::string(UCCL_SOURCE_DIR) + "/benchmarks/testbed/example_topology.yaml";
  FILE* f = std::fopen(path.c_str(), "r");
  REQUIRE(f);
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  std::fclose(f);
  auto doc = parse_topo_text(text, path);
  REQUIRE_OK(doc.status());
  PeerInfo me = peer(0, "a-node1", "");
  me.nics.push_back({"mlx5_0:1", "ib", "", "fe80::1", 0, ""});
  auto m = apply_topology_doc(doc.value(), "x", &me);
  REQUIRE((m.ok() && m.value() && me.cluster == "a"));
  CHECK((me.nics[1].fabric == "ib-a" && me.nics[1].gbps == 200));  // rate from the fabric table
  CHECK((me.rates.uplink_gbps == 25 && me.rates.host_gbps == 400));
}

}  // namespace
