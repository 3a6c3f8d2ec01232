// Schedule builders, one per collective. Each asks the selection table (select.h) for its
// algorithm through choose_algorithm(), which records the choice in OpStats::algorithm.
// Builders run when the operation starts executing.
#pragma once

#include <vector>

#include "algorithms/schedule.h"

namespace uccl {

// Element ranges of the rank blocks of a buffer (count split as evenly as possible, or given
// counts/displacements for the v-variants).
struct Blocks {
  std::vector<size_t> off, cnt;
  size_t total() const;
};
Blocks even_blocks(size_t count, int n);
Blocks blocks_from(const std::vector<size_t>& counts, const std::vector<size_t>& displs);

// Address of element `elem` of a buffer (builders take const inputs and mutable outputs alike).
inline char* at(const void* base, size_t elem, size_t esize) {
  return static_cast<char*>(const_cast<void*>(base)) + elem * esize;
}
// Records the algorithm in the operation's stats (Work.stats(), INFO logs).
inline void set_algo(const OpEnv& env, const char* name) {
  if (env.stats) env.stats->algorithm = name;
}

// The selection table's algorithm for this operation (bytes = D, see select.h), recorded in
// the stats and in the schedule (its messages' envelopes carry it: ranks that chose
// differently fail with a mismatch); its reason is INFO-logged the first time this
// communicator picks it for `coll`.
Algorithm choose_algorithm(const OpEnv& env, Schedule* s, Collective coll, size_t bytes);

Status build_all_reduce(const AllReduceArgs& a, const OpEnv& env, Schedule* s);
Status build_reduce(const ReduceArgs& a, const OpEnv& env, Schedule* s);
Status build_broadcast(const BroadcastArgs& a, const OpEnv& env, Schedule* s);
Status build_all_gather_v(const void* send, void* recv, const Blocks& b, DataType dt, const OpEnv& env, Schedule* s);
Status build_reduce_scatter_v(const void* send, void* recv, const Blocks& b, const ReduceScatterArgs& a,
                              const OpEnv& env, Schedule* s);
Status build_all_to_all_v(const AllToAllVArgs& a, const OpEnv& env, Schedule* s);
Status build_gather(const GatherArgs& a, const OpEnv& env, Schedule* s);
Status build_scatter(const ScatterArgs& a, const OpEnv& env, Schedule* s);
Status build_barrier(const OpEnv& env, Schedule* s);

// Hierarchical variants over the topology's levels (hierarchical.cc).
Status build_hier_all_reduce(const AllReduceArgs& a, const OpEnv& env, Schedule* s);
Status build_hier_all_gather_v(const void* send, void* recv, const Blocks& b, DataType dt, const OpEnv& env,
                               Schedule* s);
Status build_hier_reduce_scatter_v(const void* send, void* recv, const Blocks& b, const ReduceScatterArgs& a,
                                   const OpEnv& env, Schedule* s);

// Empty messages against the data direction of a rooted collective, so that ranks that
// disagree on the root fail with kMismatch instead of finishing silently or hanging.
void root_check(int root, const OpEnv& env, Schedule* s, bool towards_root);

// Ring pieces shared by the composite algorithms.
// Reduce-scatter over the ring: afterwards block `r` of the reduction is in out_block
// . `send` blocks are laid out by `b`.
// tmp2 is scratch for two blocks in flight (2 * largest block bytes).
void ring_reduce_scatter(const void* send, void* out_block, void* tmp2, const Blocks& b, const OpEnv& env,
                         Schedule* s);
// All-gather over the ring, in place in `buf` (this rank's block must already be there).
// own_src, when given, holds this rank's block too and is what the first step sends: the
// caller's untouched input instead of the copy just written into buf (see data_movement.cc).
void ring_all_gather(void* buf, const Blocks& b, const OpEnv& env, Schedule* s, const void* own_src = nullptr);

}  // namespace uccl
