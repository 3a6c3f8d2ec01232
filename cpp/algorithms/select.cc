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

std::string small_range(const SelectRequest& r) {
  return "UCCL_SMALL_MSG_BYTES=" + fmt_bytes(static_cast<double>(r.small_msg_bytes));
}
// Auto selection leaves latency-bound requests to direct (the measured crossover).
std::string avoid_small(const SelectRequest& r) {
  return r.bytes <= r.small_msg_bytes ? "latency-bound: at most " + small_range(r) : "";
}
std::string need_two(const SelectRequest& r) { return r.size < 2 ? "one rank" : ""; }
std::string never(const SelectRequest&) { return ""; }

// One row per algorithm; the order breaks ties.
struct Row {
  Algorithm algo;
  const char* name;
  bool forcible;        // UCCL_ALGO may name it
  bool plain;           // competes when a forced algorithm cannot run
  bool reads_topology;  // refuse/avoid look at the topology's shape
  uint32_t colls;       // base collectives it has a schedule for
  uint32_t dtypes;
  std::string (*refuse)(const SelectRequest&);  // why it cannot run the request ("" = it can)
  std::string (*avoid)(const SelectRequest&);   // why auto selection leaves it to others
  double (*cost)(const Topology&, const SelectRequest&);
};

const Row kTable[] = {
    {Algorithm::kLocal, "local", false, true, false, kAR | kAG | kRS | kBcast | kReduce | kA2A, kAnyDtype,
     [](const SelectRequest& r) { return r.size == 1 ? std::string() : "more than one rank"; }, never,
     [](const Topology&, const SelectRequest&) { return 0.0; }},
    {Algorithm::kDirect, "direct", true, true, false, kAR | kAG | kRS | kBcast | kReduce | kA2A | kGather | kScatter,
     kAnyDtype,
     [](const SelectRequest& r) {
       // gather and scatter have no local row: direct is their algorithm at any size
       return r.coll == Collective::kGather || r.coll == Collective::kScatter ? std::string() : need_two(r);
     },
     [](const SelectRequest& r) {
       const bool has_ring = (bit(r.coll) & (kAR | kAG | kRS | kBcast | kReduce)) != 0;
       return has_ring && r.bytes > r.small_msg_bytes ? "bandwidth-bound: above " + small_range(r) : std::string();
     },
     [](const Topology& t, const SelectRequest& r) {
       return predict_direct(t, cost_op(r.coll), static_cast<double>(r.bytes), r.root);
     }},
    {Algorithm::kRing, "ring", true, true, false, kAR | kAG | kRS | kBcast | kReduce, kAnyDtype,
     [](const SelectRequest& r) {
       if (r.coll == Collective::kBroadcast && r.size == 2) return std::string("a broadcast to two ranks is one message");
       return need_two(r);
     },
     avoid_small,
     [](const Topology& t, const SelectRequest& r) {
       return predict_flat_ring(t, cost_op(r.coll), static_cast<double>(r.bytes), r.root);
     }},
    {Algorithm::kHalvingDoubling, "rhd", true, false, true, kAR, kAnyDtype,
     [](const SelectRequest& r) {
       if (r.size >= 2 && (r.size & (r.size - 1)) == 0) return std::string();
       return std::to_string(r.size) + " ranks: not a power of two";
     },
     [](const SelectRequest& r) {
       // Fewer steps than the ring (2 log2 n vs 2 (n-1)) matter where each step waits for a rank
       // to be scheduled (4 ranks on the 2-core VM, 1 MiB: 450-475 us vs 545-715 us by ring).
       // Across hosts its first steps send half the buffer over the network at once.
       std::string why = avoid_small(r);
       if (!why.empty()) return why;
       if (!r.topo) return std::string("topology unknown");
       if (r.topo->num_hosts() > 1)
         return "the group spans " + std::to_string(r.topo->num_hosts()) +
                " hosts: its first steps put half the buffer on the network at once (measured: the ring wins)";
       return std::string();
     },
     [](const Topology& t, const SelectRequest& r) {
       return predict_halving_doubling(t, cost_op(r.coll), static_cast<double>(r.bytes));
     }},
    {Algorithm::kHier, "hier", true, false, true, kAR | kAG | kRS, kAnyDtype,
     [](const SelectRequest& r) {
       if (r.size < 2) return std::string("one rank");
       if (!r.topo) return std::string("topology unknown");
       if (!r.topo->hierarchical()) return "the hierarchy is flat: " + r.topo->flat_reason();
       return std::string();
     },
     avoid_small,
     [](const Topology& t, const SelectRequest& r) {
       return predict_hierarchical(t, cost_op(r.coll), static_cast<double>(r.bytes));
     }},
    {Algorithm::kDissemination, "dissemination", false, true, false, kBarrier, kAnyDtype, never, never,
     [](const Topology& t, const SelectRequest&) { return predict_dissemination(t); }},
};

const Row* row_of(Algorithm a) {
  for (const Row& r : kTable)
    if (r.algo == a) return &r;
  return nullptr;
}

// Why `row` cannot run `req` at all ("" = it can).
std::string refusal(const Row& row, const SelectRequest& req) {
  if (!(row.colls & bit(req.coll))) return std::string("no schedule for ") + collective_name(req.coll);
  if (!(row.dtypes & (1u << static_cast<int>(req.dtype)))) return std::string("does not take ") + dtype_name(req.dtype);
  return row.refuse(req);
}

double cost_of(const Row& row, const SelectRequest& req) {
  return req.topo ? row.cost(*req.topo, req) : -1;
}

std::string forcible_names() {
  std::string s = "auto";
  for (const Row& r : kTable)
    if (r.forcible) s += std::string(", ") + r.name;
  return s;
}

}  // namespace

const char* algorithm_name(Algorithm a) {
  if (a == Algorithm::kAuto) return "auto";
  const Row* r = row_of(a);
  return r ? r->name : "unknown";
}

Result<Algorithm> parse_algorithm(const std::string& name) {
  if (name.empty() || name == "auto") return Algorithm::kAuto;
  if (name == "hierarchical") return Algorithm::kHier;
  for (const Row& r : kTable)
    if (r.forcible && name == r.name) return r.algo;
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

Selection select_algorithm(const SelectRequest& in) {
  SelectRequest req = in;
  req.coll = base_collective(in.coll);
  Selection sel;
  std::string out;  // rows that cannot run the request, with why
  for (const Row& row : kTable) {
    const std::string no = refusal(row, req);
    if (!no.empty()) {
      if (row.colls & bit(req.coll)) out += std::string(out.empty() ? "" : "; ") + row.name + " (" + no + ")";
      continue;
    }
    const std::string avoid = row.avoid(req);
    sel.candidates.push_back({row.algo, cost_of(row, req), !avoid.empty(), avoid});
  }
  char head[160];
  snprintf(head, sizeof head, "%s of %s on %d ranks: ", collective_name(in.coll),
           fmt_bytes(static_cast<double>(req.bytes)).c_str(), req.size);
  sel.reason = head;

  // Which candidates compete.
  const Row* forced = req.forced == Algorithm::kAuto ? nullptr : row_of(req.forced);
  std::vector<const Candidate*> pool;
  for (const Candidate& c : sel.candidates)
    if (forced && c.algo == forced->algo) pool.push_back(&c);
  if (forced && !pool.empty()) {
    sel.reason += std::string("forced by UCCL_ALGO/algorithm option (") + fmt_seconds(pool[0]->cost) + ")";
  } else {
    if (forced)
      sel.reason += std::string("forced ") + forced->name + " cannot run (" + refusal(*forced, req) +
                    "), the plain algorithms compete; ";
    auto eligible = [&](const Candidate& c) { return !forced || row_of(c.algo)->plain; };
    for (const Candidate& c : sel.candidates)
      if (eligible(c) && !c.avoided) pool.push_back(&c);
    if (pool.empty())  // every candidate avoids it: whichever can run
      for (const Candidate& c : sel.candidates)
        if (eligible(c)) pool.push_back(&c);
  }
  if (pool.empty()) {  // cannot happen with the table above; say so rather than guess
    sel.algo = Algorithm::kDirect;
    sel.reason += "no algorithm can run it (" + out + ")";
    return sel;
  }
  const Candidate* best = pool[0];
  for (const Candidate* c : pool)
    if (c->cost >= 0 && best->cost >= 0 && c->cost < best->cost * (1 - 1e-9)) best = c;
  sel.algo = best->algo;
  sel.cost = best->cost;
  if (!forced || best->algo != forced->algo) {
    sel.reason += std::string(algorithm_name(best->algo)) + " predicted " + fmt_seconds(best->cost);
    for (const Candidate* c : pool)
      if (c != best) sel.reason += std::string(", ") + algorithm_name(c->algo) + " " + fmt_seconds(c->cost);
  }
  std::string avoided;
  for (const Candidate& c : sel.candidates)
    if (std::find(pool.begin(), pool.end(), &c) == pool.end() && c.algo != best->algo)
      avoided += std::string(avoided.empty() ? "" : "; ") + algorithm_name(c.algo) + " " + fmt_seconds(c.cost) +
                 (c.why.empty() ? "" : " (" + c.why + ")");
  if (!avoided.empty()) sel.reason += "; not chosen: " + avoided;
  if (!out.empty()) sel.reason += "; cannot run: " + out;
  return sel;
}

Result<double> predict_algorithm(const SelectRequest& req, Algorithm algo) {
  if (!req.topo) return InvalidArgument("no topology to predict with");
  if (algo == Algorithm::kAuto) return select_algorithm(req).cost;
  const Row* row = row_of(algo);
  if (!row) return InvalidArgument("unknown algorithm");
  SelectRequest r = req;
  r.coll = base_collective(req.coll);
  const std::string no = refusal(*row, r);
  if (!no.empty())
    return InvalidArgument(std::string(row->name) + " cannot run " + collective_name(req.coll) + " here: " + no);
  return row->cost(*req.topo, r);
}

}  // namespace uccl
