// Collectives that move data without combining it: all_gather(v), broadcast, all_to_all(v),
// gather, scatter, and the barrier.
#include <algorithm>

#include "algorithms/collectives.h"

namespace uccl {

void root_check(int root, const OpEnv& env, Schedule* s, bool towards_root) {
  // Rooted collectives move data in one direction only, so ranks that disagree on the root
  // could each finish having delivered nothing (broadcast, scatter) or wait for each other
  // (gather, reduce). One empty message the other way, posted with the data, makes a
  // disagreeing rank receive an Envelope naming another root: a MismatchError, not a silent
  // success or a hang. It adds no round trip: both directions are in flight together.
  const int n = env.size, r = env.rank;
  if (r != root) {
    if (towards_root) s->send(root, nullptr, 0);
    else s->recv(root, nullptr, 0);
    return;
  }
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    if (towards_root) s->recv(p, nullptr, 0);
    else s->send(p, nullptr, 0);
  }
}

Status build_all_gather_v(const void* send, void* recv, const Blocks& b, DataType dt, const OpEnv& env, Schedule* s) {
  const int n = env.size, r = env.rank;
  const size_t es = dtype_size(dt);
  const Algorithm algo = choose_algorithm(env, s, Collective::kAllGather, b.total() * es);
  if (algo == Algorithm::kHier) return build_hier_all_gather_v(send, recv, b, dt, env, s);
  if (algo != Algorithm::kRing) {  // direct, or local (one rank)
    s->new_phase();
    s->copy(at(recv, b.off[r], es), send, b.cnt[r] * es);  // no-op when already in place
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      s->send(p, send, b.cnt[r] * es).final_data = true;
      s->recv(p, at(recv, b.off[p], es), b.cnt[p] * es).final_data = true;
    }
    return Status::Ok();
  }
  // The ring's first step sends from `send` and makes the own-block copy as its tee.
  ring_all_gather(recv, b, env, s, send);
  return Status::Ok();
}

Status build_broadcast(const BroadcastArgs& a, const OpEnv& env, Schedule* s) {
  const int n = env.size, r = env.rank;
  const size_t es = dtype_size(a.dtype), bytes = a.count * es;
  const bool root = r == a.root;
  s->new_phase();
  if (root && a.recv) s->copy(a.recv, a.send, bytes);
  const Algorithm algo = choose_algorithm(env, s, Collective::kBroadcast, bytes);
  if (algo == Algorithm::kLocal) return Status::Ok();
  if (algo == Algorithm::kDirect) {
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      if (root) s->send(p, a.send, bytes);
    }
    if (!root) s->recv(a.root, a.recv, bytes);
    root_check(a.root, env, s, /*towards_root=*/true);
    return Status::Ok();
  }
  // Large messages: scatter the blocks from the root, then ring all-gather (van de Geijn):
  // every link carries about 2D/n per step instead of the root sending D to everyone.
  const Blocks b = even_blocks(a.count, n);
  if (root) {
    for (int p = 0; p < n; ++p)
      if (p != r) s->send(p, at(a.send, b.off[p], es), b.cnt[p] * es);
  } else {
    s->recv(a.root, at(a.recv, b.off[r], es), b.cnt[r] * es);
  }
  void* buf = root && !a.recv ? const_cast<void*>(a.send) : a.recv;
  ring_all_gather(buf, b, env, s);
  return Status::Ok();
}

Status build_all_to_all_v(const AllToAllVArgs& a, const OpEnv& env, Schedule* s) {
  const int n = env.size, r = env.rank;
  const size_t es = dtype_size(a.dtype);
  size_t total = 0;
  for (int p = 0; p < n; ++p) total += a.send_counts[p];
  choose_algorithm(env, s, Collective::kAllToAll, total * es);  // local or direct: the schedule below
  const void* send = a.send;
  s->new_phase();
  if (a.send == a.recv && n > 1) {
    // In place: the outgoing blocks must be saved before incoming ones overwrite them.
    size_t extent = 0;
    for (int p = 0; p < n; ++p) extent = std::max(extent, a.send_displs[p] + a.send_counts[p]);
    void* copy = env.scratch->get(extent * es + 64);
    s->copy(copy, a.send, extent * es);
    send = copy;
  }
  s->copy(at(a.recv, a.recv_displs[r], es), at(send, a.send_displs[r], es), a.recv_counts[r] * es);
  // Pairwise shifts: at distance i this rank sends to r+i and receives from r-i, so every
  // rank talks to a different peer at the same time instead of all hitting rank 0 first.
  for (int i = 1; i < n; ++i) {
    const int to = (r + i) % n, from = (r - i + n) % n;
    s->send(to, at(send, a.send_displs[to], es), a.send_counts[to] * es);
    s->recv(from, at(a.recv, a.recv_displs[from], es), a.recv_counts[from] * es);
  }
  return Status::Ok();
}

Status build_gather(const GatherArgs& a, const OpEnv& env, Schedule* s) {
  const int n = env.size, r = env.rank;
  const size_t bytes = a.count * dtype_size(a.dtype);
  choose_algorithm(env, s, Collective::kGather, n * bytes);  // direct: the schedule below
  s->new_phase();
  root_check(a.root, env, s, /*towards_root=*/false);
  if (r != a.root) {
    s->send(a.root, a.send, bytes);
    return Status::Ok();
  }
  char* out = static_cast<char*>(a.recv);
  s->copy(out + r * bytes, a.send, bytes);
  for (int p = 0; p < n; ++p)
    if (p != r) s->recv(p, out + p * bytes, bytes);
  return Status::Ok();
}

Status build_scatter(const ScatterArgs& a, const OpEnv& env, Schedule* s) {
  const int n = env.size, r = env.rank;
  const size_t bytes = a.count * dtype_size(a.dtype);
  choose_algorithm(env, s, Collective::kScatter, n * bytes);  // direct: the schedule below
  s->new_phase();
  root_check(a.root, env, s, /*towards_root=*/true);
  if (r != a.root) {
    s->recv(a.root, a.recv, bytes);
    return Status::Ok();
  }
  const char* in = static_cast<const char*>(a.send);
  s->copy(a.recv, in + r * bytes, bytes);
  for (int p = 0; p < n; ++p)
    if (p != r) s->send(p, in + p * bytes, bytes);
  return Status::Ok();
}

Status build_barrier(const OpEnv& env, Schedule* s) {
  // Dissemination barrier: ceil(log2 n) rounds of empty messages at distance 1, 2, 4, ...
  const int n = env.size, r = env.rank;
  choose_algorithm(env, s, Collective::kBarrier, 0);  // dissemination: the schedule below
  for (int d = 1; d < n; d *= 2) {
    s->new_phase();
    s->send((r + d) % n, nullptr, 0);
    s->recv((r - d + n) % n, nullptr, 0);
  }
  return Status::Ok();
}

}  // namespace uccl
