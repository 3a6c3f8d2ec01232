// Hierarchical schedules cut into segments and pipelined over the levels (algorithms/
// hierarchical.cc, Schedule::append_wavefront), checked as data: no connection. That the
// results are right on real processes is tests/test_collectives.py's w6-mixed-hier-seg.
#include <doctest/doctest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "algorithms/collectives.h"
#include "algorithms/schedule.h"
#include "topology/topology.h"

using namespace uccl;

namespace {

// clusters x hosts x ranks per host, as the emulated testbed.
std::shared_ptr<const Topology> grid(int clusters, int hosts, int per) {
  std::vector<PeerInfo> peers;
  for (int c = 0; c < clusters; ++c)
    for (int h = 0; h < hosts; ++h)
      for (int l = 0; l < per; ++l) {
        PeerInfo p;
        p.rank = static_cast<int>(peers.size());
        p.host_id = p.hostname = "c" + std::to_string(c) + "h" + std::to_string(h);
        p.cluster = "c" + std::to_string(c);
        peers.push_back(p);
      }
  return Topology::build(peers);
}

struct Sent {
  std::map<int, size_t> bytes_to, bytes_from;  // per peer
  size_t phases = 0;
};

OpEnv env_for(const std::shared_ptr<const Topology>& t, int rank, ScratchArena* scratch,
              size_t segment_bytes = SIZE_MAX) {
  OpEnv env;
  env.rank = rank;
  env.size = t->size();
  env.topo = t;
  env.scratch = scratch;
  env.hier_segment_bytes = segment_bytes;
  return env;
}

Sent all_reduce(const std::shared_ptr<const Topology>& t, int rank, size_t count, std::vector<float>* buf,
                size_t segment_bytes = SIZE_MAX) {
  ScratchArena scratch;
  const OpEnv env = env_for(t, rank, &scratch, segment_bytes);
  AllReduceArgs a;
  a.send = a.recv = buf->data();
  a.count = count;
  Schedule s(DataType::kFloat32, RedOp::kSum);
  REQUIRE(build_hier_all_reduce(a, env, &s).ok());
  Sent out;
  out.phases = s.num_phases();
  for (size_t p = 0; p < s.num_phases(); ++p)
    for (const Action& x : s.phase(p).actions) {
      if (x.kind == Action::Kind::kSend) out.bytes_to[x.peer] += x.bytes;
      if (x.kind == Action::Kind::kRecv || x.kind == Action::Kind::kRecvReduce) out.bytes_from[x.peer] += x.bytes;
      if (x.is_comm()) {  // every message stays inside the caller's buffer
        const char* p0 = reinterpret_cast<const char*>(buf->data());
        const char* q = static_cast<const char*>(x.kind == Action::Kind::kSend ? x.src : x.dst);
        CHECK(q >= p0);
        CHECK(q + x.bytes <= p0 + count * sizeof(float));
      }
    }
  return out;
}

}  // namespace

TEST_CASE("append_wavefront: phase p holds phase p - i of part i") {
  std::vector<Schedule> parts(3, Schedule(DataType::kFloat32, RedOp::kSum));
  float x[3][4] = {};
  for (int i = 0; i < 3; ++i)
    for (int p = 0; p < 4; ++p) {
      parts[i].new_phase();
      parts[i].send(10 * i + p, x[i], 4);  // the peer names (part, phase)
    }
  Schedule s(DataType::kFloat32, RedOp::kSum);
  s.append_wavefront(parts);
  REQUIRE(s.num_phases() == 6);  // 4 phases + 2 parts behind
  for (size_t p = 0; p < 6; ++p) {
    std::vector<int> peers;
    for (const Action& a : s.phase(p).actions) peers.push_back(a.peer);
    std::vector<int> want;
    for (int i = 0; i < 3; ++i)
      if (static_cast<int>(p) - i >= 0 && static_cast<int>(p) - i < 4) want.push_back(10 * i + static_cast<int>(p) - i);
    CHECK(peers == want);
  }
}

TEST_CASE("a segmented hierarchical all_reduce moves the same bytes per peer as the whole one") {
  auto t = grid(2, 2, 2);
  const size_t count = (64u << 20) / 4;  // 64 MiB: 16 segments (the most) of the default 4 MiB
  std::vector<float> buf(count);
  for (int rank : {0, 5}) {
    Sent seg = all_reduce(t, rank, count, &buf);
    Sent whole = all_reduce(t, rank, count, &buf, 0);
    CHECK(seg.bytes_to == whole.bytes_to);
    CHECK(seg.bytes_from == whole.bytes_from);
    CHECK(seg.phases == whole.phases + 15);  // the pipeline's fill: one phase per segment behind the first
  }
  // Small operations stay whole.
  std::vector<float> small(1 << 18);
  Sent s1 = all_reduce(t, 0, small.size(), &small);
  Sent s0 = all_reduce(t, 0, small.size(), &small, 0);
  CHECK(s1.phases == s0.phases);
}

TEST_CASE("a host level of 3 or more ranks runs as one phase each way; 2 ranks or a level across hosts keep the ring") {
  // 2 clusters x 1 host x 4 ranks: grid (4, 2). The host level would take 3 ring steps each way.
  auto t = grid(2, 1, 4);
  REQUIRE(t->dims() == std::vector<int>{4, 2});
  const size_t count = 8 * 1000;
  for (int r = 0; r < t->size(); ++r) {
    std::vector<float> buf(count);
    const Sent s = all_reduce(t, r, count, &buf);
    // 1 (scale/entry) + 1 (host, reduce) + 1 (cluster ring: 1 step) + 1 (avg/entry) + 1 (cluster) + 1 (host)
    CHECK(s.phases == 6);
    // The ring's bytes: every host peer gets and sends (4-1)/4 of the data over both halves,
    // spread over 3 peers: a quarter of a quarter each way per half.
    for (int q : t->host_members(t->host_of(r))) {
      if (q == r) continue;
      CHECK(s.bytes_to.at(q) == 2 * count * sizeof(float) / 4);
      CHECK(s.bytes_from.at(q) == 2 * count * sizeof(float) / 4);
    }
  }
  // Ordered receives of the host phase all reduce into the same bytes (Action::ordered).
  {
    std::vector<float> buf(count);
    ScratchArena scratch;
    const OpEnv env = env_for(t, 0, &scratch);
    AllReduceArgs a;
    a.send = a.recv = buf.data();
    a.count = count;
    Schedule s(DataType::kFloat32, RedOp::kSum);
    REQUIRE(build_hier_all_reduce(a, env, &s).ok());
    int ordered = 0;
    const void* dst = nullptr;
    for (size_t p = 0; p < s.num_phases(); ++p)
      for (const Action& x : s.phase(p).actions)
        if (x.ordered) {
          ++ordered;
          if (!dst) dst = x.dst;
          CHECK(x.dst == dst);
        }
    CHECK(ordered == 3);
  }
  // A level of 3 ranks on 3 different hosts (2 clusters x 3 hosts x 1 rank: grid (3, 2)) keeps
  // the ring: 1 + 2 + 1 + 1 + 1 + 2 phases; the same grid inside hosts takes 1 + 1 + 1 + 1 + 1 + 1.
  auto across = grid(2, 3, 1), inside = grid(2, 1, 3);
  REQUIRE(across->dims() == std::vector<int>{3, 2});
  REQUIRE(inside->dims() == std::vector<int>{3, 2});
  std::vector<float> b1(count), b2(count);
  CHECK(all_reduce(across, 0, count, &b1).phases == 8);
  CHECK(all_reduce(inside, 0, count, &b2).phases == 6);
}

TEST_CASE("hierarchical all_gather in the caller's layout keeps the ring at the host level (scattered chunks)") {
  const size_t per = 1000;
  auto sends = [&](const std::shared_ptr<const Topology>& t, int rank) {
    std::vector<float> out(per * t->size()), in(per);
    ScratchArena scratch;
    const OpEnv env = env_for(t, rank, &scratch);
    Schedule s(DataType::kFloat32, RedOp::kSum);
    REQUIRE(build_hier_all_gather_v(in.data(), out.data(), even_blocks(out.size(), t->size()), DataType::kFloat32,
                                    env, &s)
                .ok());
    std::map<int, int> to_host_peer;  // messages per peer of this rank's host
    for (size_t p = 0; p < s.num_phases(); ++p)
      for (const Action& x : s.phase(p).actions)
        if (x.kind == Action::Kind::kSend && t->host_of(x.peer) == t->host_of(rank)) ++to_host_peer[x.peer];
    return std::make_pair(s.num_phases(), to_host_peer);
  };
  // grid (3, 2): the copy, the cluster ring's step, 2 ring steps at the host level, each to the
  // ring's next rank only, 2 messages per step (a chunk = 2 blocks that lie apart).
  auto inside = sends(grid(2, 1, 3), 0);
  CHECK(inside.first == 4);
  CHECK(inside.second == std::map<int, int>{{1, 4}});
}
