// The communicator's sub-communicators (split, new_group) and what it knows of its peers:
// describe() and the topology, declared and probed (see communicator_impl.h).
#include "core/communicator_impl.h"

#include <set>

#include "base/log.h"
#include "core/link_probe.h"
#include "transports/path_choice.h"

namespace uccl {
namespace {

// The path lines of describe(): the transports' choice for each pair (Topology cannot ask them).
std::string describe_path(const PeerInfo& me, const PeerInfo& peer) { return choose_path(me, peer).describe(); }

}  // namespace

// ---- sub-communicators -----------------------------------------------------------------------

CommOptions CommunicatorImpl::merged(const CommOptions& child) const {
  CommOptions o = opts_;
  if (child.timeout_s > 0) o.timeout_s = child.timeout_s;
  if (!child.transport.empty()) o.transport = child.transport;
  if (!child.algorithm.empty()) o.algorithm = child.algorithm;
  if (!child.socket_ifname.empty()) o.socket_ifname = child.socket_ifname;
  if (!child.name.empty()) o.name = child.name;
  return o;
}

Result<std::shared_ptr<Communicator>> CommunicatorImpl::split(int color, int key, const CommOptions& opts) {
  // Everyone learns everyone's (color, key) through an all_gather on this communicator.
  std::vector<int64_t> mine = {color, key}, all(2 * size_);
  AllGatherArgs ag;
  ag.send = mine.data();
  ag.recv = all.data();
  ag.count = 2;
  ag.dtype = DataType::kInt64;
  auto w = all_gather(ag);
  if (!w.ok()) return w.status().with_context("split");
  UCCL_RETURN_IF_ERROR(w.value()->wait());
  const uint64_t seq = subcomm_seq_++;
  if (color < 0) return std::shared_ptr<Communicator>();
  std::vector<std::pair<int64_t, int>> members;  // (key, old rank)
  for (int p = 0; p < size_; ++p)
    if (all[2 * p] == color) members.emplace_back(all[2 * p + 1], p);
  std::sort(members.begin(), members.end());
  int new_rank = 0;
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i].second == rank_) new_rank = static_cast<int>(i);
  auto sub = std::make_shared<PrefixStore>(store_, "uccl/sub" + std::to_string(seq) + "/c" + std::to_string(color) + "/");
  return Communicator::create(new_rank, static_cast<int>(members.size()), sub, merged(opts));
}

Result<std::shared_ptr<Communicator>> CommunicatorImpl::new_group(const std::vector<int>& ranks,
                                                                  const CommOptions& opts) {
  std::set<int> seen;
  for (int r : ranks) {
    if (r < 0 || r >= size_) return InvalidArgument("new_group: rank " + std::to_string(r) + " out of range");
    if (!seen.insert(r).second) return InvalidArgument("new_group: rank " + std::to_string(r) + " listed twice");
  }
  const uint64_t seq = subcomm_seq_++;
  auto it = std::find(ranks.begin(), ranks.end(), rank_);
  if (it == ranks.end()) return std::shared_ptr<Communicator>();
  auto sub = std::make_shared<PrefixStore>(store_, "uccl/sub" + std::to_string(seq) + "/g/");
  return Communicator::create(static_cast<int>(it - ranks.begin()), static_cast<int>(ranks.size()), sub, merged(opts));
}

std::string CommunicatorImpl::describe() {
  std::shared_ptr<const Topology> t;
  {
    std::lock_guard<std::mutex> lock(probe_mu_);
    t = probed_;
  }
  const bool probed = t != nullptr;
  if (!t) t = topology();  // not probed yet: the rates as reported, and a line saying so
  if (!t) return engine_->describe() + "topology: unavailable\n";
  std::string s = engine_->describe() + t->describe(rank_, describe_path);
  if (t->probe_note().empty() && size_ > 1) {
    if (probe_mode() == ProbeMode::kOff) s += "  probe: off (UCCL_PROBE=off)\n";
    else if (probe_plan(*t, probe_mode()).empty()) s += "  probe: not needed (one level, or its rates declared)\n";
    else if (!probed) s += "  probe: not run yet (the first collective that chooses by topology runs it)\n";
  }
  return s;
}

Result<std::shared_ptr<const Topology>> CommunicatorImpl::probed_topology() {
  std::lock_guard<std::mutex> lock(probe_mu_);
  if (probed_) return probed_;
  if (!probe_failed_.ok()) return probe_failed_;
  auto fetched = fetch_topology();
  if (!fetched.ok()) {
    probe_failed_ = fetched.status();
    return probe_failed_;
  }
  const std::shared_ptr<const Topology> base = fetched.take();
  auto plan = probe_plan(*base, probe_mode());
  // The probe cache is per pair of hosts and per transport: one pair over shm and over tcp
  // (UCCL_TRANSPORT), or over verbs and over tcp, are different links. Only an item's leader
  // (its first sender) reads and writes the cache, so it names the path it will measure.
  for (ProbeItem& it : plan) {
    if (it.pairs[0].first != rank_) continue;
    auto paths = engine_->conns()->paths_to(base->peer(it.pairs[0].second));
    if (paths.ok() && !paths.value().empty()) it.key += "|via=" + paths.value().front().name;
  }
  if (plan.empty()) {
    probed_ = base;
    probed_set_.store(true, std::memory_order_release);
    return probed_;
  }
  auto p2p_issue = [this](const std::vector<P2POp>& ops) { return p2p(ops); };
  auto store_error = [this](const Status& s) { return store_failure(s); };
  auto t = probe_links(*base, plan, rank_, *store_, p2p_issue, store_error, engine_->timeout_s());
  if (!t.ok()) {
    probe_failed_ = t.status();
    return probe_failed_;
  }
  probed_ = t.take();
  probed_set_.store(true, std::memory_order_release);
  UCCL_INFO("communicator %s (probed):\n%s", opts_.name.c_str(), probed_->describe(rank_, describe_path).c_str());
  return probed_;
}

Status CommunicatorImpl::store_failure(const Status& s) const {
  // As ConnectionManager::store_error does, which also gives the host: that reads the peer table
  // the engine thread writes, so not from here.
  const int store_rank = engine_->conns()->store_rank();
  if (s.ok() || s.code() == Code::kTimeout || store_rank < 0 || store_rank == rank_ || store_rank >= size_) return s;
  return Status(Code::kRemoteError,
                s.message() + " (rank " + std::to_string(store_rank) + " served the store and is gone)", store_rank);
}

Result<std::shared_ptr<const Topology>> CommunicatorImpl::fetch_topology() {
  if (auto t = topo_.get_if_built()) return t;
  auto t = topo_.get(*store_, size_, engine_->timeout_s());
  if (!t.ok()) return store_failure(t.status());
  UCCL_INFO("communicator %s:\n%s", opts_.name.c_str(), t.value()->describe(rank_, describe_path).c_str());
  return t.value();
}

std::shared_ptr<const Topology> CommunicatorImpl::topology() {
  auto t = fetch_topology();
  if (t.ok()) return t.take();
  if (!topo_warned_.exchange(true)) UCCL_WARN("topology unavailable: %s", t.status().message().c_str());
  return nullptr;
}

}  // namespace uccl
