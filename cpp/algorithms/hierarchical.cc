// Hierarchical all_gather, reduce_scatter and all_reduce over the topology's grid.
//
// Rail-only style: the grid has dims s_0 (ranks per host), s_1 (hosts per cluster), s_2
// (clusters), see topology.h. A ring along dim k runs among the ranks that differ only in
// coordinate k, i.e. it crosses level k along a rail. Reduce-scatter goes from the innermost
// (fastest) dim outwards, so that each outer level only carries what is left after the
// inner ones reduced; all-gather mirrors it from the outermost dim inwards. Per rank, the
// ring along dim k moves (s_k - 1) * D / (s_0 * ... * s_k) bytes: the slowest (outermost)
// level carries (y-1) D / (x y), the rail-only paper's AGtime first term, instead of the flat
// ring's (n-1) D / n. all_reduce = reduce_scatter + all_gather. A level whose ranks share one
// host and are at least 3 runs as one all-pairs phase instead of the ring (Grid::direct).
//
// Blocks: all_gather(v) and reduce_scatter(v) have one block per rank in the caller's layout,
// so a chunk (the blocks a ring step moves, Topology::chunk) may be scattered: it is sent as
// one message per contiguous run. all_reduce chooses its own internal layout: block of rank r
// at Topology::nested_index(r), which makes every chunk one contiguous range (one message).
//
// Pipelined over the levels: an operation of at least two UCCL_HIER_SEGMENT_BYTES runs as up to
// kMaxSegments independent segments (element ranges of every block) appended as a wavefront
// (Schedule::append_wavefront), so that while segment i crosses the slow level, segment i+1 runs
// the host and cluster levels. On the emulated clusters (8 ranks on 2 cores) the fast levels of
// a 64 MiB reduce_scatter took 100-136 ms on the critical path before its 560-630 ms on the slow
// link; run one after the other, every byte waited for both.
//
// Results are identical on every rank: each block is reduced by one rank in a fixed order and
// then distributed. (They differ from the flat ring's in the last bits for floats, because
// the summation order differs; integer-valued data gives identical results.)
#include <algorithm>

#include "algorithms/collectives.h"
#include "topology/topology.h"

namespace uccl {
namespace {

using Ranges = std::vector<std::pair<size_t, size_t>>;  // (byte offset, bytes)

const BytesSetting kHierSegmentBytes("algorithms", "UCCL_HIER_SEGMENT_BYTES", "4M",
                                     "hierarchical collectives of at least twice this many bytes run as segments "
                                     "of at least this size (at most 8), pipelined over the levels; 0: never",
                                     bytes_at_least(0), Scope::kJob);
constexpr size_t kMaxSegments = 16;

size_t segments_for(size_t bytes, const OpEnv& env) {
  const size_t seg = env.hier_segment_bytes == SIZE_MAX ? kHierSegmentBytes.get() : env.hier_segment_bytes;
  return seg == 0 ? 1 : std::max<size_t>(1, std::min(kMaxSegments, bytes / seg));
}

// Segment i of k of every block: the i-th of k even pieces of each block's elements.
Blocks segment_of(const Blocks& b, size_t i, size_t k) {
  Blocks out;
  for (size_t r = 0; r < b.off.size(); ++r) {
    const Blocks pieces = even_blocks(b.cnt[r], static_cast<int>(k));
    out.off.push_back(b.off[r] + pieces.off[i]);
    out.cnt.push_back(pieces.cnt[i]);
  }
  return out;
}

struct Grid {
  const Topology& t;
  int me;
  const Blocks& b;
  std::vector<int> block_of;  // rank -> block index in b
  size_t es;

  // The byte ranges of chunk(me, dim, v), sorted and coalesced, empty runs dropped. Both ends
  // of a ring step compute the same list, so messages match one to one.
  Ranges ranges(int dim, int v) const {
    std::vector<std::pair<size_t, size_t>> el;  // (element offset, count)
    for (int q : t.chunk(me, dim, v)) {
      const int blk = block_of[q];
      if (b.cnt[blk]) el.emplace_back(b.off[blk], b.cnt[blk]);
    }
    std::sort(el.begin(), el.end());
    Ranges out;
    for (auto& [off, cnt] : el) {
      if (!out.empty() && out.back().first + out.back().second == off * es) out.back().second += cnt * es;
      else out.emplace_back(off * es, cnt * es);
    }
    return out;
  }
  // Whether the ranks along `dim` (this rank's ring at that level) share this rank's host.
  bool one_host(int dim) const {
    for (int v = 0; v < t.dims()[dim]; ++v)
      if (t.host_of(t.neighbor(me, dim, v)) != t.host_of(me)) return false;
    return true;
  }
  // The level runs as one all-pairs phase instead of n-1 ring steps (two-shot at this level):
  // inside one host (shared memory takes n-1 messages at once; over a NIC they would be an
  // incast) and from 3 ranks on (with 2 the ring is one step already). The same bytes per rank
  // as the ring, in one phase. 2 emulated hosts x 3 ranks over loopback (6 ranks on 2 cores,
  // all_reduce, medians of 3 alternating runs): 64 KiB 221 vs 365 us, 1 MiB 1054 vs 1372,
  // 16 MiB 23.5 vs 28.2 ms.
  // Only where every chunk of the level is one contiguous range (all_reduce's own layout): the
  // ordered receives of a phase take turns over the same bytes (Action::ordered), which a chunk
  // scattered over several ranges would break. Every rank of the ring decides alike: the chunks
  // of a level are the same for all of them. (all_gather in the caller's layout, whose chunks
  // are scattered, could take the direct phase too, having no ordered receives; on the grid
  // above it measured 136 / 623 / 17198 us against the ring's 158 / 820 / 15506 at 96 KiB /
  // 1.5 MiB / 24 MiB, mixed, so it keeps the ring.)
  bool direct(int dim) const {
    if (t.dims()[dim] < 3 || !one_host(dim)) return false;
    for (int v = 0; v < t.dims()[dim]; ++v)
      if (ranges(dim, v).size() > 1) return false;
    return true;
  }
  int next(int dim) const { return t.neighbor(me, dim, (t.coord(me, dim) + 1) % t.dims()[dim]); }
  int prev(int dim) const { return t.neighbor(me, dim, (t.coord(me, dim) - 1 + t.dims()[dim]) % t.dims()[dim]); }
};

char* at(const void* base, size_t off) { return static_cast<char*>(const_cast<void*>(base)) + off; }

// Reduce-scatter along `dim` (a ring, or one phase where Grid::direct says): afterwards work
// holds, for chunk(me, dim, coord(me, dim)), the reduction over the level's ranks. `in` is the level's input (the caller's data at dim 0, `work`
// itself above, where it holds the inner levels' partial sums).
void reduce_scatter_dim(const Grid& g, int dim, const void* in, char* work, Schedule* s) {
  const int n = g.t.dims()[dim], c = g.t.coord(g.me, dim), next = g.next(dim), prev = g.prev(dim);
  if (g.direct(dim)) {
    // Two-shot's first phase at this level: every peer's chunk goes straight to it, and the
    // receives of chunk c reduce into it in a fixed order (own data, then coordinates c+1,
    // c+2, ...: Action::ordered), so the sum is the same whichever peer's data lands first.
    // The chunks are disjoint, so in place (in == work) the sends read what no receive writes.
    s->new_phase();
    for (int k = 1; k < n; ++k) {
      const int v = (c + k) % n, peer = g.t.neighbor(g.me, dim, v);
      for (auto& [off, len] : g.ranges(dim, v)) s->send(peer, at(in, off), len);
    }
    for (int k = 1; k < n; ++k) {
      const int peer = g.t.neighbor(g.me, dim, (c + k) % n);
      for (auto& [off, len] : g.ranges(dim, c))
        s->recv_reduce(peer, work + off, k == 1 ? at(in, off) : nullptr, len).ordered = true;
    }
    return;
  }
  // Step k sends chunk c-k-1 and folds chunk c-k-2 into the incoming one; after n-1 steps the
  // last chunk received is c itself, fully reduced.
  for (int k = 0; k < n - 1; ++k) {
    const int sb = (c - k - 1 + 2 * n) % n, rb = (c - k - 2 + 2 * n) % n;
    s->new_phase();
    for (auto& [off, len] : g.ranges(dim, sb)) s->send(next, k == 0 ? at(in, off) : work + off, len);
    for (auto& [off, len] : g.ranges(dim, rb)) s->recv_reduce(prev, work + off, at(in, off), len);
  }
}

// All-gather along `dim` (a ring, or one phase where Grid::direct says), in place in `work`.
void all_gather_dim(const Grid& g, int dim, char* work, Schedule* s) {
  const int n = g.t.dims()[dim], c = g.t.coord(g.me, dim), next = g.next(dim), prev = g.prev(dim);
  if (g.direct(dim)) {  // two-shot's second phase: chunk c to every peer, theirs from each
    s->new_phase();
    for (int k = 1; k < n; ++k) {
      const int v = (c + k) % n, peer = g.t.neighbor(g.me, dim, v);
      for (auto& [off, len] : g.ranges(dim, c)) s->send(peer, work + off, len);
      for (auto& [off, len] : g.ranges(dim, v)) s->recv(peer, work + off, len);
    }
    return;
  }
  for (int k = 0; k < n - 1; ++k) {
    const int sb = (c - k + n) % n, rb = (c - k - 1 + n) % n;
    s->new_phase();
    for (auto& [off, len] : g.ranges(dim, sb)) s->send(next, work + off, len);
    for (auto& [off, len] : g.ranges(dim, rb)) s->recv(prev, work + off, len);
  }
}

void reduce_scatter_all_dims(const Grid& g, const void* in, char* work, Schedule* s) {
  const int ndims = static_cast<int>(g.t.dims().size());
  for (int d = 0; d < ndims; ++d) reduce_scatter_dim(g, d, d == 0 ? in : work, work, s);
}

void all_gather_all_dims(const Grid& g, char* work, Schedule* s) {
  for (int d = static_cast<int>(g.t.dims().size()) - 1; d >= 0; --d) all_gather_dim(g, d, work, s);
}


// One segment of an all_reduce (or the whole operation): a.send/a.recv/a.count are its range.
void hier_all_reduce_part(const AllReduceArgs& a, const OpEnv& env, Schedule* s) {
  const Topology& t = *env.topo;
  const size_t es = dtype_size(a.dtype), bytes = a.count * es;
  const Blocks b = even_blocks(a.count, env.size);
  Grid g{t, env.rank, b, {}, es};
  for (int r = 0; r < env.size; ++r) g.block_of.push_back(t.nested_index(r));
  s->new_phase();
  const void* in = a.send;
  if (a.op == RedOp::kPremulSum) {
    s->scale(a.recv, a.send, bytes, a.scalar);  // scale once, then reduce in place
    in = a.recv;
  }
  char* work = static_cast<char*>(a.recv);
  reduce_scatter_all_dims(g, in, work, s);
  const int mine = g.block_of[env.rank];
  s->new_phase();
  if (a.op == RedOp::kAvg)
    s->divide(work + b.off[mine] * es, work + b.off[mine] * es, b.cnt[mine] * es, env.size);
  all_gather_all_dims(g, work, s);
}

void hier_all_gather_part(const void* send, void* recv, const Blocks& b, size_t es, const OpEnv& env, Schedule* s) {
  Grid g{*env.topo, env.rank, b, {}, es};
  for (int r = 0; r < env.size; ++r) g.block_of.push_back(r);
  s->new_phase();
  s->copy(at(recv, b.off[env.rank] * es), send, b.cnt[env.rank] * es);  // no-op in place
  all_gather_all_dims(g, static_cast<char*>(recv), s);
}

// `send` is the whole input (or its scaled copy), `work` the scratch in the input's layout; the
// part reduces b's ranges and writes my block's range to recv.
void hier_reduce_scatter_part(const void* send, void* recv, char* work, const Blocks& b, RedOp op, size_t es,
                              const OpEnv& env, Schedule* s) {
  Grid g{*env.topo, env.rank, b, {}, es};
  for (int r = 0; r < env.size; ++r) g.block_of.push_back(r);
  reduce_scatter_all_dims(g, send, work, s);
  s->new_phase();
  const size_t mine = b.cnt[env.rank] * es;
  s->copy(recv, work + b.off[env.rank] * es, mine);
  if (op == RedOp::kAvg) s->divide(recv, recv, mine, env.size);
}

bool overlaps(const void* a, size_t an, const void* b, size_t bn) {
  const char *x = static_cast<const char*>(a), *y = static_cast<const char*>(b);
  return x < y + bn && y < x + an;
}

}  // namespace

Status build_hier_all_reduce(const AllReduceArgs& a, const OpEnv& env, Schedule* s) {
  const size_t es = dtype_size(a.dtype), k = segments_for(a.count * es, env);
  if (k == 1) {
    hier_all_reduce_part(a, env, s);
    return Status::Ok();
  }
  const Blocks seg = even_blocks(a.count, static_cast<int>(k));
  std::vector<Schedule> parts(k, Schedule(a.dtype, a.op));
  for (size_t i = 0; i < k; ++i) {
    AllReduceArgs p = a;
    p.send = at(a.send, seg.off[i] * es);
    p.recv = at(a.recv, seg.off[i] * es);
    p.count = seg.cnt[i];
    hier_all_reduce_part(p, env, &parts[i]);
  }
  s->append_wavefront(parts);
  return Status::Ok();
}

Status build_hier_all_gather_v(const void* send, void* recv, const Blocks& b, DataType dt, const OpEnv& env,
                               Schedule* s) {
  const size_t es = dtype_size(dt), k = segments_for(b.total() * es, env);
  if (k == 1) {
    hier_all_gather_part(send, recv, b, es, env, s);
    return Status::Ok();
  }
  std::vector<Schedule> parts(k, Schedule(dt, RedOp::kSum));
  for (size_t i = 0; i < k; ++i) {
    const Blocks p = segment_of(b, i, k);
    hier_all_gather_part(at(send, (p.off[env.rank] - b.off[env.rank]) * es), recv, p, es, env, &parts[i]);
  }
  s->append_wavefront(parts);
  return Status::Ok();
}

Status build_hier_reduce_scatter_v(const void* send, void* recv, const Blocks& b, const ReduceScatterArgs& a,
                                   const OpEnv& env, Schedule* s) {
  const size_t es = dtype_size(a.dtype);
  size_t extent = 0;  // the input's extent (blocks are packed, but be safe)
  for (size_t i = 0; i < b.off.size(); ++i) extent = std::max(extent, (b.off[i] + b.cnt[i]) * es);
  // Scratch: [premul-scaled input][work: the input's layout, holding partial sums]. The work
  // area keeps the caller's input untouched and lets recv alias the input (in place).
  const size_t scaled = a.op == RedOp::kPremulSum ? extent : 0;
  char* scratch = static_cast<char*>(env.scratch->get(scaled + extent + 64));
  s->new_phase();
  if (a.op == RedOp::kPremulSum) {
    s->scale(scratch, send, extent, a.scalar);
    send = scratch;
  }
  char* work = scratch + scaled;
  // Segments write recv while later ones still read the input: only where they cannot meet
  // (recv inside the input is in place only for equal blocks, where segment i of my block is
  // the piece that segment i alone reads).
  size_t k = segments_for(extent, env);
  bool equal = true;
  for (size_t c : b.cnt) equal &= c == b.cnt[env.rank];
  if (overlaps(recv, b.cnt[env.rank] * es, send, extent) &&
      !(equal && recv == at(send, b.off[env.rank] * es)))
    k = 1;
  if (k == 1) {
    hier_reduce_scatter_part(send, recv, work, b, a.op, es, env, s);
    return Status::Ok();
  }
  std::vector<Schedule> parts(k, Schedule(a.dtype, a.op));
  for (size_t i = 0; i < k; ++i) {
    const Blocks p = segment_of(b, i, k);
    hier_reduce_scatter_part(send, at(recv, (p.off[env.rank] - b.off[env.rank]) * es), work, p, a.op, es, env,
                             &parts[i]);
  }
  s->append_wavefront(parts);
  return Status::Ok();
}

}  // namespace uccl
