// The one place that picks algorithms.
//
// Every algorithm is a row of one table (select.cc), in the manner of UCC's score maps: the
// collectives it has a schedule for, the dtypes it takes, the group shapes it can run on
// (refuse: why not), the requests auto selection leaves to others although it could run them
// (avoid: a measured crossover, e.g. direct only up to UCCL_SMALL_MSG_BYTES, rhd only on one
// host), and its predicted time from the cost model (topology/cost_model.h). Selection:
//   1. UCCL_ALGO / the algorithm option forces a row; if that row refuses the request, the
//      plain rows (local, direct, ring) compete instead, never another specialised one;
//   2. otherwise every row that does not refuse is a candidate, and those it does not avoid go
//      first (all of them only when every candidate avoids the request, e.g. a broadcast to two
//      ranks above the direct range, which only direct can run);
//   3. the lowest predicted time wins; ties (or no topology to predict with) keep table order.
// The reason (every candidate with its predicted time, every other row with why it is out) is
// returned for INFO logs and uccl.cost.choose().
//
// Pure: no connection, no communicator. Every rank computes the same answer from the same
// Topology and settings, so the ranks agree without exchanging a message.
#pragma once

#include <bitset>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "uccl/status.h"
#include "uccl/types.h"

namespace uccl {

class Topology;

// The algorithms (enum Algorithm) and their names (algorithm_name) are vocabulary: uccl/types.h.
// The names UCCL_ALGO / the algorithm option accept ("" and "auto" = kAuto, "hierarchical" =
// "hier"); anything else is InvalidArgument listing them.
Result<Algorithm> parse_algorithm(const std::string& name);
// A communicator's algorithm: its algorithm option, or UCCL_ALGO where the option is empty or
// "auto", parsed.
Result<Algorithm> resolve_algorithm(const std::string& option);

// all_gather_v -> all_gather, reduce_scatter_v -> reduce_scatter, all_to_all_v -> all_to_all.
Collective base_collective(Collective c);

struct SelectRequest {
  Collective coll = Collective::kAllReduce;
  DataType dtype = DataType::kFloat32;
  size_t bytes = 0;         // D: the full vector (see CostOp in topology/cost_model.h)
  int size = 1;             // ranks in the group
  int root = 0;
  const Topology* topo = nullptr;  // nullptr: shape unknown, costs not predicted
  Algorithm forced = Algorithm::kAuto;
  size_t small_msg_bytes = 0;      // UCCL_SMALL_MSG_BYTES
};

struct Candidate {
  Algorithm algo;
  double cost;              // predicted seconds; < 0 unknown
  bool avoided;             // could run, but auto selection prefers others (why says so)
  std::string why;          // why it is out or avoided ("" for a plain candidate)
};

struct Selection {
  Algorithm algo = Algorithm::kLocal;
  double cost = -1;         // predicted seconds of the chosen algorithm; < 0 unknown
  std::string reason;       // for people: candidates with costs, the others with why not
  std::vector<Candidate> candidates;  // the rows that could run the request
};

// The choice with its reason and every candidate's predicted cost (logs, uccl.cost).
Selection select_algorithm(const SelectRequest& req);
// The same choice without text, for the hot path: costs are only predicted when two candidates
// compete, nothing is allocated otherwise.
Algorithm choose_fast(const SelectRequest& req);

// Remembers one communicator's recent choices, so that an operation repeated at the same size
// does not run the cost model again (a 256 KiB all_reduce on shm takes ~20 us; predicting two
// candidates would add microseconds). Not thread safe: one per communicator's executing state.
class SelectionMemo {
 public:
  // choose_fast(req), remembered; *fresh says it was computed now.
  Algorithm choose(const SelectRequest& req, bool* fresh);

 private:
  struct Entry {
    bool valid = false;
    Collective coll = Collective::kAllReduce;
    DataType dtype = DataType::kFloat32;
    Algorithm forced = Algorithm::kAuto;
    int root = 0, size = 0;
    size_t bytes = 0, small = 0;
    const Topology* topo = nullptr;
    Algorithm algo = Algorithm::kAuto;
  };
  static constexpr size_t kEntries = 16;
  Entry entries_[kEntries];
};

// What one communicator keeps between operations: its memo and which choices it INFO-logged.
// Builders run one at a time per communicator, so no lock.
struct SelectionState {
  SelectionMemo memo;
  std::bitset<256> logged;  // (base collective, algorithm) pairs
};

// Whether the choice for this collective can depend on the topology's shape (the core then
// fetches every rank's PeerInfo before the first such operation).
bool needs_topology(Collective coll);

// The predicted seconds of `algo` for the request, or an error saying why it cannot run it.
Result<double> predict_algorithm(const SelectRequest& req, Algorithm algo);

}  // namespace uccl
