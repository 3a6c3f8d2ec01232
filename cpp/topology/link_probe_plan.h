// Which links a communicator measures, and the per-host cache of what it measured.
//
// Without a topology file the cost model would trust what each interface reports (a tc-shaped
// 1 Gbit/s veth says 10 Gbit/s; an uplink between clusters says nothing), so ring vs
// hierarchical would be right only by luck. The probe (core/link_probe.h) times a few MiB over
// representative pairs of each level instead. The plan is pure: every rank computes the same
// one from the same Topology, so the ranks agree on who sends what without a message.
//   level 0 (host):    the first host with two ranks: its first rank -> its second.
//   level 1 (cluster): the first cluster with two hosts: host A's first rank -> host B's.
//   level 2 (uplink):  clusters 0 and 1: host i of one -> host i of the other, all at once,
//                      because the uplink is shared by the whole cluster (the aggregate is the
//                      figure; it is at most the sum of the hosts' NICs).
// auto probes only when the choice can depend on rates (two or more levels present) and only
// the levels the topology file does not declare; on probes every present level (declared rates
// still win in the model, the measured ones are shown beside them).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "topology/topology.h"

namespace uccl {

enum class ProbeMode { kAuto, kOn, kOff };

struct ProbeItem {
  int level = 0;
  std::vector<std::pair<int, int>> pairs;  // (sender, receiver), timed concurrently
  std::string key;  // identifies the pairs' hosts (host ids, addresses) for the cache
};

std::vector<ProbeItem> probe_plan(const Topology& t, ProbeMode mode);

// The cache: one line per item key, "<unix seconds> <bytes/s> <key>", in `path`. A lookup
// older than max_age_s (or max_age_s <= 0) misses. Failures to read or write are silent
// misses (the cache only saves time).
double probe_cache_lookup(const std::string& path, const std::string& key, double max_age_s);
void probe_cache_store(const std::string& path, const std::string& key, double bytes_per_s);

}  // namespace uccl
