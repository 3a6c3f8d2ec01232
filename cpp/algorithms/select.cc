#include "algorithms/select.h"

#include <algorithm>
#include <cstdio>

#include "topology/cost_model.h"
#include "topology/topology.h"

namespace uccl {
namespace {

constexpr uint32_t bit(Collective c) { return 1u << static_cast<int>(c); }
constexpr uint32_t kAnyDtype = (1u << kNumDataTypes) - 1;  // the reduction kernels take every dtype

constexpr uint32_t kAR = bit(Collective::kAllReduce), kAG = bit(Collective::kAllGather),
                   kRS = bit(Collective::kReduceScatter), kBcast = bit(Collective::kBroadcast),
                   kReduce = bit(Collective::kReduce), kA2A = bit(Collective::kAllToAll),
                   kGather = bit(Collective::kGather), kScatter = bit(Collective::kScatter),
                   kBarrier = bit(Collective::kBarrier);

std::string fmt_bytes(double b) {
  char s[32];
  if (b < 1024) snprintf(s, sizeof s, "%.0f B", b);
  else if (b < (1 << 20)) snprintf(s, sizeof s, "%.4g KiB", b / 1024);
  else snprintf(s, sizeof s, "%.4g MiB", b / (1 << 20));
  return s;
}

std::string fmt_seconds(double t) {
  if (t < 0) return "cost unknown (no topology)";
  char s[32];
  if (t < 1e-3) snprintf(s, sizeof s, "%.3g us", t * 1e6);
  else snprintf(s, sizeof s, "%.3g ms", t * 1e3);
  return s;
}

CostOp cost_op(Collective c) {
  switch (base_collective(c)) {
    case Collective::kAllReduce: return CostOp::kAllReduce;
    case Collective::kReduceScatter: return CostOp::kReduceScatter;
    case Collective::kBroadcast: return CostOp::kBroadcast;
    case Collective::kReduce: return CostOp::kReduce;
    case Collective::kAllToAll: return CostOp::kAllToAll;
    case Collective::kGather: return CostOp::kGather;
    case Collective::kScatter: return CostOp::kScatter;
    case Collective::kBarrier: return CostOp::kBarrier;
    default: return CostOp::kAllGather;
  }
}

// The largest request that is latency-bound (direct's): UCCL_SMALL_MSG_BYTES, divided by n-1
// for an all_reduce of n > 2 ranks, since direct moves n-1 copies of the buffer into every rank
// where the ring and halving/doubling move about two. 4 ranks on the 2-core VM (busy_cpu.py
// --ranks 4): 32 / 64 KiB took 46 / 132 us direct against 28 / 39 us by rhd (Open MPI 35-51 / 44-57).
size_t direct_limit(const SelectRequest& r) {
  return r.coll == Collective::kAllReduce && r.size > 2 ? r.small_msg_bytes / static_cast<size_t>(r.size - 1)
                                                        : r.small_msg_bytes;
}

std::string small_range(const SelectRequest& r) {
  std::string s = "UCCL_SMALL_MSG_BYTES=" + fmt_bytes(static_cast<double>(r.small_msg_bytes));
  if (direct_limit(r) != r.small_msg_bytes)
    s += " / " + std::to_string(r.size - 1) + " = " + fmt_bytes(static_cast<double>(direct_limit(r)));
  return s;
}

// Two-shot all_reduce from this size (see its row).
constexpr size_t kTwoShotAllReduceMin = 32u << 20;

// Predicates answer on the hot path without building text: `why` is only filled when given.
bool say(std::string* why, const std::string& text) {
  if (why) *why = text;
  return true;
}
// Auto selection leaves latency-bound requests to direct (the measured crossover).
bool avoid_small(const SelectRequest& r, std::string* why) {
  return r.bytes <= direct_limit(r) && say(why, "latency-bound: at most " + small_range(r));
}
bool need_two(const SelectRequest& r, std::string* why) { return r.size < 2 && say(why, "one rank"); }
bool never(const SelectRequest&, std::string*) { return false; }

// One row per algorithm; the order breaks ties.
struct Row {
  Algorithm algo;  // its name: algorithm_name (uccl/types.h)
  bool forcible;        // UCCL_ALGO may name it
  bool plain;           // competes when a forced algorithm cannot run
  bool reads_topology;  // refuse/avoid look at the topology's shape
  uint32_t colls;       // base collectives it has a schedule for
  uint32_t dtypes;
  bool (*refuse)(const SelectRequest&, std::string* why);  // it cannot run the request
  bool (*avoid)(const SelectRequest&, std::string* why);   // auto selection leaves it to others
  double (*cost)(const Topology&, const SelectRequest&);
};

const Row kTable[] = {
    {Algorithm::kLocal, false, true, false, kAR | kAG | kRS | kBcast | kReduce | kA2A, kAnyDtype,
     [](const SelectRequest& r, std::string* why) { return r.size != 1 && say(why, "more than one rank"); }, never,
     [](const Topology&, const SelectRequest&) { return 0.0; }},
    {Algorithm::kDirect, true, true, false, kAR | kAG | kRS | kBcast | kReduce | kA2A | kGather | kScatter,
     kAnyDtype,
     [](const SelectRequest& r, std::string* why) {
       // gather and scatter have no local row: direct is their algorithm at any size
       return r.coll != Collective::kGather && r.coll != Collective::kScatter && need_two(r, why);
     },
     [](const SelectRequest& r, std::string* why) {
       const bool has_ring = (bit(r.coll) & (kAR | kAG | kRS | kBcast | kReduce)) != 0;
       return has_ring && r.bytes > direct_limit(r) && say(why, "bandwidth-bound: above " + small_range(r));
     },
     [](const Topology& t, const SelectRequest& r) {
       return predict_direct(t, cost_op(r.coll), static_cast<double>(r.bytes), r.root);
     }},
    {Algorithm::kRing, true, true, false, kAR | kAG | kRS | kBcast | kReduce, kAnyDtype,
     [](const SelectRequest& r, std::string* why) {
       if (r.coll == Collective::kBroadcast && r.size == 2) return say(why, "a broadcast to two ranks is one message");
       return need_two(r, why);
     },
     avoid_small,
     [](const Topology& t, const SelectRequest& r) {
       return predict_flat_ring(t, cost_op(r.coll), static_cast<double>(r.bytes), r.root);
     }},
    {Algorithm::kHalvingDoubling, true, false, true, kAR, kAnyDtype,
     [](const SelectRequest& r, std::string* why) {
       return !(r.size >= 2 && (r.size & (r.size - 1)) == 0) &&
              say(why, std::to_string(r.size) + " ranks: not a power of two");
     },
     [](const SelectRequest& r, std::string* why) {
       // Fewer steps than the ring (2 log2 n vs 2 (n-1)) matter where each step waits for a rank
       // to be scheduled (4 ranks on the 2-core VM, 1 MiB: 450-475 us vs 545-715 us by ring).
       // Across hosts its first steps send half the buffer over the network at once.
       if (avoid_small(r, why)) return true;
       if (!r.topo) return say(why, "topology unknown");
       if (r.topo->num_hosts() > 1)
         return say(why, "the group spans " + std::to_string(r.topo->num_hosts()) +
                             " hosts: its first steps put half the buffer on the network at once (measured: the ring wins)");
       return false;
     },
     [](const Topology& t, const SelectRequest& r) {
       return predict_halving_doubling(t, cost_op(r.coll), static_cast<double>(r.bytes));
     }},
    {Algorithm::kHier, true, false, true, kAR | kAG | kRS, kAnyDtype,
     [](const SelectRequest& r, std::string* why) {
       if (r.size < 2) return say(why, "one rank");
       if (!r.topo) return say(why, "topology unknown");
       if (!r.topo->hierarchical()) return say(why, "the hierarchy is flat: " + r.topo->flat_reason());
       return false;
     },
     avoid_small,
     [](const Topology& t, const SelectRequest& r) {
       return predict_hierarchical(t, cost_op(r.coll), static_cast<double>(r.bytes));
     }},
    {Algorithm::kTwoShot, true, false, true, kAR | kRS, kAnyDtype, need_two,
     [](const SelectRequest& r, std::string* why) {
       // Its phases have every rank send to all others at once: fine through shared memory,
       // incast on a NIC. On one host it moves the ring's bytes in 2 phases instead of
       // 2 (n-1) (the 2-core VM, against the previous choice in alternating rounds:
       // reduce_scatter of 4 ranks 1 / 16 / 64 MiB 0.36 / 5.1 / 27.4 ms vs the ring's 0.52 / 7.0 /
       // 36.4; all_reduce 64 MiB on 3 / 4 / 8 ranks 41.9 / 49.0 / 104 vs 50.0 / 55.9 / 118).
       // An all_reduce of 4-16 MiB, whose buffers stay in the caches, is faster by rhd or the
       // ring (16 MiB: 12.1 vs 11.2 ms on 4 ranks, 9.6 vs 8.5 on 3), hence the floor.
       if (avoid_small(r, why)) return true;
       if (!r.topo) return say(why, "topology unknown");
       if (r.topo->num_hosts() > 1)
         return say(why, "the group spans " + std::to_string(r.topo->num_hosts()) + " hosts: every rank would send to all at once");
       if (r.coll == Collective::kAllReduce && r.bytes < kTwoShotAllReduceMin)
         return say(why, "an all_reduce below " + fmt_bytes(static_cast<double>(kTwoShotAllReduceMin)) +
                             " (measured: rhd and the ring win while the buffers stay in the caches)");
       return false;
     },
     [](const Topology& t, const SelectRequest& r) {
       return predict_two_shot(t, cost_op(r.coll), static_cast<double>(r.bytes));
     }},
    {Algorithm::kDissemination, false, true, false, kBarrier, kAnyDtype, never, never,
     [](const Topology& t, const SelectRequest&) { return predict_dissemination(t); }},
};
constexpr int kRows = sizeof(kTable) / sizeof(kTable[0]);

const Row* row_of(Algorithm a) {
  for (const Row& r : kTable)
    if (r.algo == a) return &r;
  return nullptr;
}

// Whether `row` cannot run `req` at all (why, when given, says so).
bool refuses(const Row& row, const SelectRequest& req, std::string* why) {
  if (!(row.colls & bit(req.coll))) return say(why, std::string("no schedule for ") + collective_name(req.coll));
  if (!(row.dtypes & (1u << static_cast<int>(req.dtype))))
    return say(why, std::string("does not take ") + dtype_name(req.dtype));
  return row.refuse(req, why);
}

double cost_of(const Row& row, const SelectRequest& req) { return req.topo ? row.cost(*req.topo, req) : -1; }

std::string forcible_names() {
  std::string s = "auto";
  for (const Row& r : kTable)
    if (r.forcible) s += std::string(", ") + algorithm_name(r.algo);
  return s;
}

// The choice, without text or allocation unless two candidates must be compared by cost.
// req.coll is a base collective. Returns the chosen row; *forced_ran says the forced one runs.
struct Choice {
  int best = -1;
  double cost = -1;
  bool forced_runs = false;
  uint32_t pool = 0;  // rows that competed
  uint32_t runs = 0;  // rows that can run the request
};

Choice decide(const SelectRequest& req, bool want_cost) {
  Choice c;
  uint32_t avoided = 0;
  for (int i = 0; i < kRows; ++i) {
    if (refuses(kTable[i], req, nullptr)) continue;
    c.runs |= 1u << i;
    if (kTable[i].avoid(req, nullptr)) avoided |= 1u << i;
  }
  const Row* forced = req.forced == Algorithm::kAuto ? nullptr : row_of(req.forced);
  if (forced && (c.runs & (1u << (forced - kTable)))) {
    c.forced_runs = true;
    c.pool = 1u << (forced - kTable);
  } else {
    uint32_t eligible = c.runs;
    if (forced)
      for (int i = 0; i < kRows; ++i)
        if (!kTable[i].plain) eligible &= ~(1u << i);
    c.pool = eligible & ~avoided;
    if (!c.pool) c.pool = eligible;  // every candidate avoids it: whichever can run
  }
  for (int i = 0; i < kRows; ++i) {
    if (!(c.pool & (1u << i))) continue;
    if (c.best < 0) {
      c.best = i;
      // one candidate: its cost only matters when asked for
      if (want_cost || (c.pool >> (i + 1))) c.cost = cost_of(kTable[i], req);
      continue;
    }
    const double cost = cost_of(kTable[i], req);
    if (cost >= 0 && c.cost >= 0 && cost < c.cost * (1 - 1e-9)) {
      c.best = i;
      c.cost = cost;
    }
  }
  return c;
}

}  // namespace

Result<Algorithm> parse_algorithm(const std::string& name) {
  if (name.empty() || name == "auto") return Algorithm::kAuto;
  if (name == "hierarchical") return Algorithm::kHier;
  for (const Row& r : kTable)
    if (r.forcible && name == algorithm_name(r.algo)) return r.algo;
  return InvalidArgument("unknown algorithm '" + name + "': expected " + forcible_names() + " (or hierarchical)");
}

Collective base_collective(Collective c) {
  switch (c) {
    case Collective::kAllGatherV: return Collective::kAllGather;
    case Collective::kReduceScatterV: return Collective::kReduceScatter;
    case Collective::kAllToAllV: return Collective::kAllToAll;
    default: return c;
  }
}

bool needs_topology(Collective coll) {
  for (const Row& r : kTable)
    if (r.reads_topology && (r.colls & bit(base_collective(coll)))) return true;
  return false;
}

Algorithm choose_fast(const SelectRequest& in) {
  SelectRequest req = in;
  req.coll = base_collective(in.coll);
  const Choice c = decide(req, false);
  return c.best < 0 ? Algorithm::kDirect : kTable[c.best].algo;
}

Selection select_algorithm(const SelectRequest& in) {
  SelectRequest req = in;
  req.coll = base_collective(in.coll);
  const Choice c = decide(req, true);
  Selection sel;
  std::string out, avoided;  // rows that cannot run it / that competed not, with why
  for (int i = 0; i < kRows; ++i) {
    const Row& row = kTable[i];
    std::string why;
    if (!(c.runs & (1u << i))) {
      if ((row.colls & bit(req.coll)) && refuses(row, req, &why)) out += (out.empty() ? "" : "; ") + std::string(algorithm_name(row.algo)) + " (" + why + ")";
      continue;
    }
    const bool avoids = row.avoid(req, &why);
    const double cost = i == c.best ? c.cost : cost_of(row, req);
    sel.candidates.push_back({row.algo, cost, avoids, why});
    if (!(c.pool & (1u << i)) && i != c.best)
      avoided += (avoided.empty() ? "" : "; ") + std::string(algorithm_name(row.algo)) + " " + fmt_seconds(cost) + (why.empty() ? "" : " (" + why + ")");
  }
  char head[160];
  snprintf(head, sizeof head, "%s of %s on %d ranks: ", collective_name(in.coll),
           fmt_bytes(static_cast<double>(req.bytes)).c_str(), req.size);
  sel.reason = head;
  if (c.best < 0) {  // cannot happen with the table above; say so rather than guess
    sel.algo = Algorithm::kDirect;
    sel.reason += "no algorithm can run it (" + out + ")";
    return sel;
  }
  const Row& best = kTable[c.best];
  sel.algo = best.algo;
  sel.cost = c.cost;
  const Row* forced = req.forced == Algorithm::kAuto ? nullptr : row_of(req.forced);
  if (c.forced_runs) {
    sel.reason += std::string(algorithm_name(best.algo)) + " forced by UCCL_ALGO/algorithm option (" + fmt_seconds(c.cost) + ")";
  } else {
    if (forced) {
      std::string why;
      refuses(*forced, req, &why);
      sel.reason += std::string("forced ") + algorithm_name(forced->algo) + " cannot run (" + why + "), the plain algorithms compete; ";
    }
    sel.reason += std::string(algorithm_name(best.algo)) + " predicted " + fmt_seconds(c.cost);
    for (const Candidate& k : sel.candidates)
      if (k.algo != best.algo && (c.pool & (1u << (row_of(k.algo) - kTable))))
        sel.reason += std::string(", ") + algorithm_name(k.algo) + " " + fmt_seconds(k.cost);
  }
  if (!avoided.empty()) sel.reason += "; not chosen: " + avoided;
  if (!out.empty()) sel.reason += "; cannot run: " + out;
  return sel;
}

Algorithm SelectionMemo::choose(const SelectRequest& req, bool* fresh) {
  const uint64_t key = static_cast<uint64_t>(req.bytes) ^ (static_cast<uint64_t>(req.coll) << 56) ^
                       (static_cast<uint64_t>(static_cast<uint32_t>(req.root)) << 40);
  Entry& e = entries_[((key * 0x9E3779B97F4A7C15ull) >> 60) % kEntries];
  if (e.valid && e.bytes == req.bytes && e.coll == req.coll && e.root == req.root && e.topo == req.topo &&
      e.forced == req.forced && e.small == req.small_msg_bytes && e.size == req.size && e.dtype == req.dtype) {
    *fresh = false;
    return e.algo;
  }
  e = {true, req.coll, req.dtype, req.forced, req.root, req.size, req.bytes, req.small_msg_bytes, req.topo,
       choose_fast(req)};
  *fresh = true;
  return e.algo;
}

Result<double> predict_algorithm(const SelectRequest& req, Algorithm algo) {
  if (!req.topo) return InvalidArgument("no topology to predict with");
  if (algo == Algorithm::kAuto) return select_algorithm(req).cost;
  const Row* row = row_of(algo);
  if (!row) return InvalidArgument("unknown algorithm");
  SelectRequest r = req;
  r.coll = base_collective(req.coll);
  std::string why;
  if (refuses(*row, r, &why))
    return InvalidArgument(std::string(algorithm_name(row->algo)) + " cannot run " + collective_name(req.coll) + " here: " + why);
  return row->cost(*req.topo, r);
}

}  // namespace uccl
