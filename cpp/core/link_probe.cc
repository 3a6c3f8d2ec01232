#include "core/link_probe.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <thread>

#include "base/log.h"

namespace uccl {

const TextSetting kProbe("topology", "UCCL_PROBE", "auto",
                         "measure link rates before the first collective: auto (when the algorithm choice depends "
                         "on them and the topology file does not declare them), on (every level), off",
                         one_of({"auto", "on", "off"}), Scope::kJob);
const BytesSetting kProbeBytes("topology", "UCCL_PROBE_BYTES", "4M", "bytes each probe pair sends (also S/4 first)",
                               bytes_at_least(64 * 1024), Scope::kJob);
const DoubleSetting kProbeCacheS("topology", "UCCL_PROBE_CACHE_S", "300",
                                 "reuse a probe result for the same host pair and transport for this many seconds "
                                 "(/tmp/uccl-probe-cache; 0 = always measure)",
                                 number_above(-1e-9));

namespace {

constexpr uint32_t kProbeTag = 0x70726f62;  // "prob"
const char* kCachePath = "/tmp/uccl-probe-cache";
constexpr int kRounds = 2;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string key(size_t item, const std::string& what) { return "uccl/probe/" + std::to_string(item) + "/" + what; }

P2POp op(bool send, void* buf, size_t bytes, int peer) {
  P2POp o;
  o.is_send = send;
  o.buf = buf;
  o.count = bytes;
  o.dtype = DataType::kUint8;
  o.peer = peer;
  o.tag = kProbeTag;
  return o;
}

Status run(const P2PIssuer& p2p, std::vector<P2POp> ops, double timeout_s) {
  auto w = p2p(ops);
  if (!w.ok()) return w.status();
  return w.value()->wait(timeout_s);
}

// Sender side of one pair: S/4 then S bytes, each acknowledged; returns the two durations.
struct Timing {
  double small = 0, large = 0;        // best durations (steady clock)
  double from[kRounds] = {}, to[kRounds] = {};  // each round's large send, wall clock (concurrent pairs)
};

double wall_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Result<Timing> send_side(const P2PIssuer& p2p, int peer, std::vector<uint8_t>& buf, double timeout_s) {
  uint8_t ack = 0;
  // A first exchange sets the connection up (not timed).
  UCCL_RETURN_IF_ERROR(run(p2p, {op(true, buf.data(), 1, peer), op(false, &ack, 1, peer)}, timeout_s));
  // Two rounds, the faster of each size: the first round also pays one-time costs (buffers
  // growing, a segment mapped) that are not the link's.
  double t[2] = {1e30, 1e30};
  Timing out;
  const size_t sizes[2] = {buf.size() / 4, buf.size()};
  for (int i = 0; i < 2 * kRounds; ++i) {
    const double w0 = wall_s(), t0 = now_s();
    UCCL_RETURN_IF_ERROR(run(p2p, {op(true, buf.data(), sizes[i % 2], peer), op(false, &ack, 1, peer)}, timeout_s));
    const double d = now_s() - t0;
    if (i % 2 == 1) out.from[i / 2] = w0, out.to[i / 2] = w0 + d;
    t[i % 2] = std::min(t[i % 2], d);
  }
  out.small = t[0];
  out.large = t[1];
  return out;
}

Status recv_side(const P2PIssuer& p2p, int peer, std::vector<uint8_t>& buf, double timeout_s) {
  uint8_t ack = 1;
  const size_t sizes[1 + 2 * kRounds] = {1, buf.size() / 4, buf.size(), buf.size() / 4, buf.size()};
  for (size_t s : sizes) {
    UCCL_RETURN_IF_ERROR(run(p2p, {op(false, buf.data(), s, peer)}, timeout_s));
    UCCL_RETURN_IF_ERROR(run(p2p, {op(true, &ack, 1, peer)}, timeout_s));
  }
  return Status::Ok();
}

// The store with its failures mapped (see StoreErrorMapper). A wait polls in short slices: the
// store's client is shared with the engine thread, which may need it meanwhile (a peer's address,
// to finish connecting for an operation queued before the one that triggered this probe), and
// one long get would hold the client for the whole wait. (4 ranks issuing asynchronous
// operations, then the first large one: every rank sat in the probe until its timeout, one
// engine thread blocked on the client while its rank's probe waited for a key its peer could
// not set without that connection.)
struct MappedStore {
  static constexpr double kPollSliceS = 0.05;
  Store& s;
  const StoreErrorMapper& map;
  Status fix(const Status& st) const { return st.ok() || !map ? st : map(st); }
  Status set(const std::string& k, const std::string& v) { return fix(s.set(k, v)); }
  Result<std::string> get(const std::string& k, double timeout_s) {
    const double deadline = now_s() + timeout_s;
    for (;;) {
      auto r = s.get(k, std::max(0.001, std::min(kPollSliceS, deadline - now_s())));
      if (r.ok()) return r;
      if (r.status().code() != Code::kTimeout || now_s() >= deadline) return fix(r.status());
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // a thread waiting for the client takes it
    }
  }
};

}  // namespace

ProbeMode probe_mode() {
  const std::string& m = kProbe.get();
  return m == "on" ? ProbeMode::kOn : m == "off" ? ProbeMode::kOff : ProbeMode::kAuto;
}

Result<std::shared_ptr<const Topology>> probe_links(const Topology& base, const std::vector<ProbeItem>& plan,
                                                    int rank, Store& store_in, const P2PIssuer& p2p,
                                                    const StoreErrorMapper& store_error, double timeout_s) {
  MappedStore store{store_in, store_error};
  const size_t bytes = kProbeBytes.get();
  std::vector<uint8_t> buf;
  const double t_start = now_s();
  int cached = 0;
  for (size_t k = 0; k < plan.size(); ++k) {
    const ProbeItem& it = plan[k];
    const int leader = it.pairs[0].first;
    int my_pair = -1;
    bool sender = false;
    for (size_t i = 0; i < it.pairs.size(); ++i) {
      if (it.pairs[i].first == rank) my_pair = static_cast<int>(i), sender = true;
      if (it.pairs[i].second == rank) my_pair = static_cast<int>(i);
    }
    if (my_pair < 0) continue;
    std::string go;
    if (rank == leader) {
      if (k > 0) {
        auto prev = store.get(key(k - 1, "rate"), timeout_s);
        if (!prev.ok()) return prev.status().with_context("link probe: waiting for the previous level");
      }
      const double hit = probe_cache_lookup(kCachePath, it.key, kProbeCacheS.get());
      go = hit > 0 ? "cached" : "measure";
      UCCL_RETURN_IF_ERROR(store.set(key(k, "go"), go));
      if (hit > 0) UCCL_RETURN_IF_ERROR(store.set(key(k, "rate"), std::to_string(hit)));
    } else {
      auto g = store.get(key(k, "go"), timeout_s);
      if (!g.ok()) return g.status().with_context("link probe: waiting for rank " + std::to_string(leader));
      go = g.value();
    }
    if (go == "cached") continue;
    if (buf.size() != bytes) buf.assign(bytes, 0x5a);
    const auto& pr = it.pairs[my_pair];
    if (!sender) {
      Status s = recv_side(p2p, pr.first, buf, timeout_s);
      if (!s.ok()) return s.with_context("link probe (" + std::string(level_name(it.level)) + " level)");
      continue;
    }
    auto t = send_side(p2p, pr.second, buf, timeout_s);
    if (!t.ok()) return t.status().with_context("link probe (" + std::string(level_name(it.level)) + " level)");
    char text[160];
    const Timing& tm = t.value();
    snprintf(text, sizeof text, "%.9g %.9g %.17g %.17g %.17g %.17g", tm.small, tm.large, tm.from[0], tm.to[0], tm.from[1],
             tm.to[1]);
    UCCL_RETURN_IF_ERROR(store.set(key(k, "t/" + std::to_string(my_pair)), text));
    if (rank != leader) continue;
    // The aggregate over the item's concurrent pairs: all bytes over the slowest pair's time.
    double small = 0, large = 0, from[kRounds], to[kRounds];
    for (int r = 0; r < kRounds; ++r) from[r] = 1e300, to[r] = 0;
    for (size_t i = 0; i < it.pairs.size(); ++i) {
      auto v = store.get(key(k, "t/" + std::to_string(i)), timeout_s);
      if (!v.ok()) return v.status().with_context("link probe: timings of rank " + std::to_string(it.pairs[i].first));
      std::istringstream is(v.value());
      double a = 0, b = 0;
      is >> a >> b;
      small = std::max(small, a);
      large = std::max(large, b);
      for (int r = 0; r < kRounds; ++r) {
        double f = 0, e = 0;
        is >> f >> e;
        from[r] = std::min(from[r], f);
        to[r] = std::max(to[r], e);
      }
    }
    const double n = static_cast<double>(it.pairs.size());
    // The slope cancels latency and burst; when noise makes it meaningless (the large send took
    // hardly longer than the small one: a fast link on a busy machine), the plain quotient.
    const double slope_s = large - small;
    double rate = slope_s > 0.25 * large ? n * (bytes - bytes / 4) / slope_s : n * bytes / large;
    // Concurrent pairs that did not quite overlap (a sender descheduled on a busy host) would
    // each see the link alone: the aggregate is then all their bytes over the span from the
    // first start to the last end of their large sends in one round (wall clock: the hosts' clocks agree
    // to far better than a few MiB take on a shared uplink).
    // The round whose large sends overlapped best counts.
    if (it.pairs.size() > 1) {
      double span = 1e300;
      for (int r = 0; r < kRounds; ++r)
        if (to[r] > from[r]) span = std::min(span, to[r] - from[r]);
      if (span < 1e300) rate = std::min(rate, n * bytes / span);
    }
    probe_cache_store(kCachePath, it.key, rate);
    UCCL_RETURN_IF_ERROR(store.set(key(k, "rate"), std::to_string(rate)));
  }
  double measured[kNumLevels] = {0, 0, 0};
  std::string levels;
  for (size_t k = 0; k < plan.size(); ++k) {
    auto v = store.get(key(k, "rate"), timeout_s);
    if (!v.ok()) return v.status().with_context("link probe: the " + std::string(level_name(plan[k].level)) + " rate");
    measured[plan[k].level] = std::stod(v.value());
    levels += std::string(levels.empty() ? "" : ",") + level_name(plan[k].level);
  }
  for (size_t k = 0; k < plan.size(); ++k) {  // cached figures are not measured again: say so
    auto g = store.get(key(k, "go"), timeout_s);
    if (g.ok() && g.value() == "cached") ++cached;
  }
  char note[160];
  snprintf(note, sizeof note, "UCCL_PROBE=%s, %zu bytes per pair, levels %s%s, %.0f ms", kProbe.get().c_str(), bytes,
           levels.c_str(), cached ? (" (" + std::to_string(cached) + " from the cache)").c_str() : "",
           (now_s() - t_start) * 1e3);
  UCCL_INFO("link probe: %s", note);
  return Topology::build(base.peers(), measured, note);
}

}  // namespace uccl
