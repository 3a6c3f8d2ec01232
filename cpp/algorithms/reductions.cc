// all_reduce, reduce_scatter and reduce: the collectives that combine data.
//
// Results are bitwise identical on every rank: the ring reduces each block in one fixed order
// and then distributes it, and the direct algorithm reduces in rank order everywhere (a
// replica that drifts by one ULP per step would slowly break data-parallel training).
#include <algorithm>

#include "algorithms/collectives.h"
#include "topology/topology.h"

namespace uccl {
namespace {

size_t max_block(const Blocks& b) { return b.cnt.empty() ? 0 : *std::max_element(b.cnt.begin(), b.cnt.end()); }

// Reduces the n equally sized slots of `slots` into dst in rank order: dst = s0 op s1 op ...
void reduce_slots_in_order(void* dst, const char* slots, size_t bytes, int n, Schedule* s) {
  s->reduce(dst, slots, slots + bytes, bytes);
  for (int p = 2; p < n; ++p) s->reduce(dst, dst, slots + p * bytes, bytes);
}

}  // namespace


void ring_reduce_scatter(const void* send, void* out_block, void* tmp2, const Blocks& b, const OpEnv& env,
                         Schedule* s) {
  const int n = env.size, r = env.rank, next = (r + 1) % n, prev = (r - 1 + n) % n;
  const size_t es = dtype_size(s->dtype()), maxb = max_block(b) * es;
  char* tmp[2] = {static_cast<char*>(tmp2), static_cast<char*>(tmp2) + maxb};
  if (n == 1) {
    s->copy(out_block, at(send, b.off[r], es), b.cnt[r] * es);
    return;
  }
  // Step k sends the partial sum of block r-k-1 and folds block r-k-2 into the incoming one,
  // so after n-1 steps this rank holds the full reduction of its own block r.
  for (int k = 0; k < n - 1; ++k) {
    const int sb = (r - k - 1 + 2 * n) % n, rb = (r - k - 2 + 2 * n) % n;
    s->new_phase();
    s->send(next, k == 0 ? at(send, b.off[sb], es) : tmp[(k - 1) % 2], b.cnt[sb] * es);
    s->recv_reduce(prev, k == n - 2 ? out_block : tmp[k % 2], at(send, b.off[rb], es), b.cnt[rb] * es);
  }
}

void ring_all_gather(void* buf, const Blocks& b, const OpEnv& env, Schedule* s, const void* own_src) {
  const int n = env.size, r = env.rank, next = (r + 1) % n, prev = (r - 1 + n) % n;
  const size_t es = dtype_size(s->dtype());
  for (int k = 0; k < n - 1; ++k) {
    const int sb = (r - k + n) % n, rb = (r - k - 1 + n) % n;
    s->new_phase();
    // Every block lands where it stays (final data: it is only sent on, never computed with).
    if (k == 0 && own_src) {
      // From `send`, with the copy into the own block as the send's tee, not from that copy:
      // the copy's lines sit modified in this core's cache, and a peer pulling them (CMA) or
      // reading them from the ring would snoop each one (3x slower at 2 MiB on the 2-core VM,
      // 183 vs 59 us); shm instead copies and writes each chunk while it is in cache.
      s->send_tee(next, own_src, b.cnt[sb] * es, at(buf, b.off[sb], es)).final_data = true;
    } else {
      s->send(next, at(buf, b.off[sb], es), b.cnt[sb] * es).final_data = true;
    }
    s->recv(prev, at(buf, b.off[rb], es), b.cnt[rb] * es).final_data = true;
  }
}

namespace {

// Recursive halving/doubling instead of the ring (select.cc says when: forced by
// UCCL_ALGO=rhd, or a bandwidth-sized all_reduce of a power-of-two group on one host, where it
// moves the same bytes as the ring in 2 log2(n) steps instead of 2 (n - 1)).
// Recursive halving, then recursive doubling (Rabenseifner), for a power-of-two group. Step k
// of the reduce-scatter pairs rank r with r ^ (n >> (k + 1)); each keeps the half of its range
// that holds its own block, sends the other half and reduces the partner's copy of its half
// into recv. The all-gather retraces the steps, exchanging ever larger ranges. Every block is
// reduced once, on its owner, so all ranks get identical bytes.

void halving_doubling_all_reduce(const void* send, void* recv, const Blocks& b, bool avg, const OpEnv& env,
                                 Schedule* s) {
  const int n = env.size, r = env.rank;
  const size_t es = dtype_size(s->dtype());
  auto range_bytes = [&](int lo, int hi) { return (b.off[hi - 1] + b.cnt[hi - 1] - b.off[lo]) * es; };
  int lo = 0, hi = n;
  for (int d = n / 2; d >= 1; d /= 2) {
    const int partner = r ^ d, mid = lo + (hi - lo) / 2;
    const bool keep_low = (r & d) == 0;
    const int keep_lo = keep_low ? lo : mid, keep_hi = keep_low ? mid : hi;
    const int give_lo = keep_low ? mid : lo, give_hi = keep_low ? hi : mid;
    if (d != n / 2) s->new_phase();
    const void* src = d == n / 2 ? send : recv;  // the first step folds `send` in
    s->send(partner, at(src, b.off[give_lo], es), range_bytes(give_lo, give_hi));
    s->recv_reduce(partner, at(recv, b.off[keep_lo], es), at(src, b.off[keep_lo], es), range_bytes(keep_lo, keep_hi));
    lo = keep_lo;
    hi = keep_hi;
  }
  s->new_phase();
  if (avg) s->divide(at(recv, b.off[r], es), at(recv, b.off[r], es), b.cnt[r] * es, n);
  for (int d = 1; d < n; d *= 2) {
    const int partner = r ^ d, width = hi - lo;
    const int other_lo = (r & d) == 0 ? hi : lo - width;  // the partner's range, next to ours
    if (d != 1) s->new_phase();
    s->send(partner, at(recv, b.off[lo], es), range_bytes(lo, hi)).final_data = true;
    s->recv(partner, at(recv, b.off[other_lo], es), range_bytes(other_lo, other_lo + width)).final_data = true;
    lo = std::min(lo, other_lo);
    hi = lo + 2 * width;
  }
}

// Two-shot (NCCL's name; select.cc says when): every rank reduces its own block from all n-1
// peers in one phase, then sends it to all of them in a second: 2 phases instead of the
// ring's 2 (n-1), the same bytes on every link. The n-1 reducing receives of the first phase
// all accumulate into the block, so they are ordered (Action::ordered): the sum is formed in the
// same order every run whichever peer's data comes first (own data, then ranks r+1, r+2, ...);
// on shm they take turns a few hundred KiB at a time, so each piece is combined from every
// peer while in cache. (On the 2-core VM the gain comes from the phases: leads from 128 KiB to
// the whole block were within the noise; and the all-gather half by recursive doubling or by
// the ring instead of direct was no faster at 4-64 MiB.) One rank reduces each block, so all
// ranks get identical bytes. In place works: a rank writes only its own block while its peers
// read theirs from it.
void two_shot_reduce_scatter(const void* send, void* out_block, const Blocks& b, const OpEnv& env, Schedule* s) {
  const int n = env.size, r = env.rank;
  const size_t es = dtype_size(s->dtype());
  for (int k = 1; k < n; ++k) {
    const int p = (r + k) % n;
    s->send(p, at(send, b.off[p], es), b.cnt[p] * es);
  }
  for (int k = 1; k < n; ++k)
    s->recv_reduce((r + k) % n, out_block, k == 1 ? at(send, b.off[r], es) : nullptr, b.cnt[r] * es).ordered = true;
}

void two_shot_all_reduce(const void* send, void* recv, const Blocks& b, bool avg, const OpEnv& env, Schedule* s) {
  const int n = env.size, r = env.rank;
  const size_t es = dtype_size(s->dtype());
  two_shot_reduce_scatter(send, at(recv, b.off[r], es), b, env, s);
  s->new_phase();
  if (avg) s->divide(at(recv, b.off[r], es), at(recv, b.off[r], es), b.cnt[r] * es, n);
  for (int k = 1; k < n; ++k) {
    const int p = (r + k) % n;
    s->send(p, at(recv, b.off[r], es), b.cnt[r] * es).final_data = true;
    s->recv(p, at(recv, b.off[p], es), b.cnt[p] * es).final_data = true;
  }
}

}  // namespace

Status build_all_reduce(const AllReduceArgs& a, const OpEnv& env, Schedule* s) {
  const int n = env.size, r = env.rank;
  const size_t es = dtype_size(a.dtype), bytes = a.count * es;
  const Algorithm algo = choose_algorithm(env, s, Collective::kAllReduce, bytes);
  if (algo == Algorithm::kHier) return build_hier_all_reduce(a, env, s);
  const void* send = a.send;
  s->new_phase();
  if (a.op == RedOp::kPremulSum) {
    s->scale(a.recv, a.send, bytes, a.scalar);  // scale once, then sum in place
    send = a.recv;
  }
  if (algo == Algorithm::kLocal) {
    s->copy(a.recv, send, bytes);
    return Status::Ok();
  }
  if (algo == Algorithm::kDirect) {
    char* slots = static_cast<char*>(env.scratch->get(n * bytes));
    s->copy(slots + r * bytes, send, bytes);
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      s->send(p, send, bytes);
      s->recv(p, slots + p * bytes, bytes);
    }
    s->new_phase();
    reduce_slots_in_order(a.recv, slots, bytes, n, s);
    if (a.op == RedOp::kAvg) s->divide(a.recv, a.recv, bytes, n);
    return Status::Ok();
  }
  const Blocks b = even_blocks(a.count, n);
  if (algo == Algorithm::kHalvingDoubling) {
    halving_doubling_all_reduce(send, a.recv, b, a.op == RedOp::kAvg, env, s);
    return Status::Ok();
  }
  if (algo == Algorithm::kTwoShot) {
    two_shot_all_reduce(send, a.recv, b, a.op == RedOp::kAvg, env, s);
    return Status::Ok();
  }
  // Ring: reduce-scatter accumulating straight into recv (the first step folds `send` in, so
  // out-of-place needs no copy), then all-gather of the finished blocks.
  const int next = (r + 1) % n, prev = (r - 1 + n) % n;
  for (int k = 0; k < n - 1; ++k) {
    const int sb = (r - k + n) % n, rb = (r - k - 1 + n) % n;
    if (k > 0) s->new_phase();
    s->send(next, at(k == 0 ? send : a.recv, b.off[sb], es), b.cnt[sb] * es);
    s->recv_reduce(prev, at(a.recv, b.off[rb], es), at(send, b.off[rb], es), b.cnt[rb] * es);
  }
  const int done = (r + 1) % n;
  s->new_phase();
  if (a.op == RedOp::kAvg) s->divide(at(a.recv, b.off[done], es), at(a.recv, b.off[done], es), b.cnt[done] * es, n);
  // All-gather in which this rank starts from its finished block `done` (not block r).
  for (int k = 0; k < n - 1; ++k) {
    const int sb = (done - k + n) % n, rb = (done - k - 1 + n) % n;
    if (k > 0) s->new_phase();
    s->send(next, at(a.recv, b.off[sb], es), b.cnt[sb] * es).final_data = true;
    s->recv(prev, at(a.recv, b.off[rb], es), b.cnt[rb] * es).final_data = true;
  }
  return Status::Ok();
}

Status build_reduce_scatter_v(const void* send, void* recv, const Blocks& b, const ReduceScatterArgs& a,
                              const OpEnv& env, Schedule* s) {
  const int n = env.size, r = env.rank;
  const size_t es = dtype_size(a.dtype), total = b.total() * es, mine = b.cnt[r] * es, maxb = max_block(b) * es;
  const Algorithm algo = choose_algorithm(env, s, Collective::kReduceScatter, total);
  if (algo == Algorithm::kHier) return build_hier_reduce_scatter_v(send, recv, b, a, env, s);
  const bool direct = algo == Algorithm::kDirect;  // local (one rank) takes the ring's path
  // Scratch layout: [premul-scaled input][direct: n slots | ring: two blocks in flight | two-shot: none].
  const size_t scaled_bytes = a.op == RedOp::kPremulSum ? total : 0;
  const size_t work_bytes = direct ? n * maxb : algo == Algorithm::kTwoShot ? 0 : 2 * maxb;
  char* scratch = static_cast<char*>(env.scratch->get(scaled_bytes + work_bytes + 64));
  s->new_phase();
  if (a.op == RedOp::kPremulSum) {
    s->scale(scratch, send, total, a.scalar);
    send = scratch;
  }
  char* work = scratch + scaled_bytes;
  if (direct) {
    // Everyone sends block p to rank p; this rank reduces the n contributions in rank order.
    s->copy(work + r * mine, at(send, b.off[r], es), mine);
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      s->send(p, at(send, b.off[p], es), b.cnt[p] * es);
      s->recv(p, work + p * mine, mine);
    }
    s->new_phase();
    if (n == 1) s->copy(recv, work, mine);
    else reduce_slots_in_order(recv, work, mine, n, s);
  } else if (algo == Algorithm::kTwoShot) {
    two_shot_reduce_scatter(send, recv, b, env, s);
    s->new_phase();
  } else {
    ring_reduce_scatter(send, recv, work, b, env, s);
    s->new_phase();
  }
  if (a.op == RedOp::kAvg) s->divide(recv, recv, mine, n);
  return Status::Ok();
}

Status build_reduce(const ReduceArgs& a, const OpEnv& env, Schedule* s) {
  const int n = env.size, r = env.rank;
  const size_t es = dtype_size(a.dtype), bytes = a.count * es;
  const bool root = r == a.root;
  const Algorithm algo = choose_algorithm(env, s, Collective::kReduce, bytes);
  const Blocks b = even_blocks(a.count, n);
  const size_t maxb = max_block(b) * es;
  const bool direct = algo != Algorithm::kRing;  // local (one rank) takes the direct path
  const size_t scaled_bytes = a.op == RedOp::kPremulSum ? bytes : 0;
  char* scratch = static_cast<char*>(env.scratch->get(scaled_bytes + (direct ? n * bytes : 3 * maxb) + 64));
  const void* send = a.send;
  s->new_phase();
  if (a.op == RedOp::kPremulSum) {
    s->scale(scratch, a.send, bytes, a.scalar);
    send = scratch;
  }
  char* work = scratch + scaled_bytes;
  if (direct) {
    root_check(a.root, env, s, /*towards_root=*/false);
    if (!root) {
      s->send(a.root, send, bytes);
      return Status::Ok();
    }
    s->copy(work + r * bytes, send, bytes);
    for (int p = 0; p < n; ++p)
      if (p != r) s->recv(p, work + p * bytes, bytes);
    s->new_phase();
    if (n == 1) s->copy(a.recv, work, bytes);
    else reduce_slots_in_order(a.recv, work, bytes, n, s);
    if (a.op == RedOp::kAvg) s->divide(a.recv, a.recv, bytes, n);
    return Status::Ok();
  }
  // Ring reduce-scatter (every rank reduces one block), then the blocks are gathered at root:
  // the root's links carry D(n-1)/n instead of the D(n-1) of a naive reduce.
  char* block = work;
  ring_reduce_scatter(send, block, work + maxb, b, env, s);
  s->new_phase();
  if (a.op == RedOp::kAvg) s->divide(block, block, b.cnt[r] * es, n);
  if (!root) {
    s->send(a.root, block, b.cnt[r] * es);
    return Status::Ok();
  }
  s->copy(at(a.recv, b.off[r], es), block, b.cnt[r] * es);
  for (int p = 0; p < n; ++p)
    if (p != r) s->recv(p, at(a.recv, b.off[p], es), b.cnt[p] * es);
  return Status::Ok();
}

}  // namespace uccl
