// The link-rate probe: times a few MiB over the pairs of topology/link_probe_plan.h, once per
// communicator, before its first operation whose algorithm choice reads the topology.
//
// Agreement: every figure the cost model will use comes out of the store. For each plan item
// its first sender decides (cache hit or measure), collects the senders' timings, computes the
// rate and publishes it; every rank reads the same published rates and builds the same
// Topology, so every rank picks the same algorithm. Items run one after another (an item's
// senders start only once the previous item's rate is published), so probes never share a link.
// Timing: each sender sends S/4 then S bytes (two rounds, the faster of each kept), each answered by a one-byte ack; the rate is the
// slope (3S/4 over the difference of the two times), which cancels the round-trip latency and
// a shaper's initial burst. Ranks outside an item only wait for its published rate.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/config.h"
#include "uccl/args.h"
#include "uccl/store.h"
#include "uccl/work.h"
#include "topology/link_probe_plan.h"
#include "topology/topology.h"

namespace uccl {

// UCCL_PROBE (auto|on|off), UCCL_PROBE_BYTES, UCCL_PROBE_CACHE_S.
extern const TextSetting kProbe;
extern const BytesSetting kProbeBytes;
extern const DoubleSetting kProbeCacheS;
ProbeMode probe_mode();

// Issues point-to-point operations on the communicator being probed (its p2p()).
using P2PIssuer = std::function<Result<WorkPtr>(const std::vector<P2POp>&)>;
// Turns a failed store operation into the error to report (the connection manager's
// store_error(): a vanished store names the rank that served it).
using StoreErrorMapper = std::function<Status(const Status&)>;

// Runs `plan` (non-empty) and returns `base` rebuilt with the measured rates. Every rank of the
// communicator must call it with the same plan (the same base Topology).
Result<std::shared_ptr<const Topology>> probe_links(const Topology& base, const std::vector<ProbeItem>& plan,
                                                    int rank, Store& store, const P2PIssuer& p2p,
                                                    const StoreErrorMapper& store_error, double timeout_s);

}  // namespace uccl
