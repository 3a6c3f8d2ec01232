#include "base/config.h"

#include <cstdlib>
#include <functional>
#include <string>

namespace uccl {
namespace {

// One row per variable. `apply` parses the text (env value or default) into Config.
struct VarSpec {
  const char* name;
  const char* def;
  const char* meaning;
  std::function<void(Config&, const std::string&)> apply;
};

size_t parse_bytes(const std::string& s) {
  // Accepts plain numbers and K/M/G suffixes (binary), e.g. "4M".
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end && (*end == 'k' || *end == 'K')) v *= 1024;
  if (end && (*end == 'm' || *end == 'M')) v *= 1024 * 1024;
  if (end && (*end == 'g' || *end == 'G')) v *= 1024.0 * 1024 * 1024;
  return static_cast<size_t>(v);
}
bool parse_bool(const std::string& s) { return !(s == "0" || s == "false" || s == "no" || s == "off" || s.empty()); }
int parse_int(const std::string& s) { return std::atoi(s.c_str()); }

const std::vector<VarSpec>& specs() {
  static const std::vector<VarSpec> table = {
      {"UCCL_DEBUG", "WARN", "log level on stderr: NONE, WARN, INFO (transport per peer, algorithm per op), TRACE",
       [](Config& c, const std::string& v) {
         c.debug = v == "NONE" ? LogLevel::kNone : v == "INFO" ? LogLevel::kInfo
                 : v == "TRACE" ? LogLevel::kTrace : LogLevel::kWarn;
       }},
      {"UCCL_DEBUG_FILE", "", "write logs to this file instead of stderr",
       [](Config& c, const std::string& v) { c.debug_file = v; }},
      {"UCCL_TIMEOUT_S", "600", "default timeout in seconds for every wait (connect, collectives, store)",
       [](Config& c, const std::string& v) { c.timeout_s = std::atof(v.c_str()); }},
      {"UCCL_TRANSPORT", "auto", "force a transport between peers: auto, tcp, shm, verbs",
       [](Config& c, const std::string& v) { c.transport = v; }},
      {"UCCL_ALGO", "auto", "force an algorithm: auto, ring, direct, hier, rhd (recursive halving/doubling all_reduce)",
       [](Config& c, const std::string& v) { c.algo = v; }},
      {"UCCL_HOST_ID", "", "host identity for shared-memory decisions (default: hostname+boot id+netns)",
       [](Config& c, const std::string& v) { c.host_id = v; }},
      {"UCCL_PROGRESS_THREAD", "1", "run a background progress thread for asynchronous ops",
       [](Config& c, const std::string& v) { c.progress_thread = parse_bool(v); }},
      {"UCCL_SPIN_US", "5000",
       "microseconds a waiting rank spins (progress passes) before it sleeps until a peer's write wakes it",
       [](Config& c, const std::string& v) { c.spin_us = std::atof(v.c_str()); }},
      {"UCCL_WAIT_YIELD", "auto",
       "sched_yield between the spin's passes: auto does when more ranks share the host than it has CPUs "
       "(like Open MPI when oversubscribed), 1 always, 0 never",
       [](Config& c, const std::string& v) { c.wait_yield = v == "auto" || v.empty() ? -1 : parse_bool(v) ? 1 : 0; }},
      {"UCCL_NSOCKS_PERPEER", "2", "TCP sockets per peer; large messages are striped across them",
       [](Config& c, const std::string& v) { c.nsocks_per_peer = parse_int(v); }},
      {"UCCL_SOCKET_IFNAME", "", "interfaces to use (NCCL syntax: prefixes, ^exclude, =exact)",
       [](Config& c, const std::string& v) { c.socket_ifname = v; }},
      {"UCCL_SOCKET_FAMILY", "", "restrict sockets to AF_INET or AF_INET6",
       [](Config& c, const std::string& v) { c.socket_family = v; }},
      {"UCCL_TCP_STRIPE_MIN_BYTES", "256K", "messages at least this large are striped across the sockets of a peer",
       [](Config& c, const std::string& v) { c.tcp_stripe_min_bytes = parse_bytes(v); }},
      {"UCCL_SHM_RING_BYTES", "4M", "size of each shared-memory ring (one per direction and peer)",
       [](Config& c, const std::string& v) { c.shm_ring_bytes = parse_bytes(v); }},
      {"UCCL_SHM_CMA", "1",
       "single-copy cross-memory attach (process_vm_readv) for large shm messages; the process then allows "
       "ptrace-attach by same-user processes (PR_SET_PTRACER_ANY)",
       [](Config& c, const std::string& v) { c.shm_cma = parse_bool(v); }},
      {"UCCL_SHM_CMA_MIN_BYTES", "128K", "shm messages at least this large use single-copy CMA",
       [](Config& c, const std::string& v) { c.shm_cma_min_bytes = parse_bytes(v); }},
      {"UCCL_SHM_CMA_MAX_BYTES", "16M",
       "one-way shm messages larger than this go through the ring again (memory-bound: both cores copy); "
       "a sender that receives in the same step keeps CMA",
       [](Config& c, const std::string& v) { c.shm_cma_max_bytes = parse_bytes(v); }},
      {"UCCL_SHM_CMA_PUSH", "1",
       "in exchange steps the sender writes large shm messages into the posted receive (process_vm_writev) "
       "instead of the receiver pulling them: the sender reads its just-written data from its own cache",
       [](Config& c, const std::string& v) { c.shm_cma_push = parse_bool(v); }},
      {"UCCL_SMALL_MSG_BYTES", "64K", "latency-oriented (direct) algorithms up to this many bytes",
       [](Config& c, const std::string& v) { c.small_msg_bytes = parse_bytes(v); }},
      {"UCCL_TOPO_FILE", "", "topology file (JSON or YAML): clusters, hosts, NICs, fabrics, link rates",
       [](Config& c, const std::string& v) { c.topo_file = v; }},
      {"UCCL_CLUSTER", "", "name of the cluster this rank belongs to",
       [](Config& c, const std::string& v) { c.cluster = v; }},
      {"UCCL_IB_HCA", "", "RDMA devices to use (NCCL syntax: mlx5_0:1,mlx5_1, ^exclude, =exact)",
       [](Config& c, const std::string& v) { c.ib_hca = v; }},
      {"UCCL_IB_GID_INDEX", "-1", "RoCE GID index (-1: pick the RoCE v2 IPv4 GID)",
       [](Config& c, const std::string& v) { c.ib_gid_index = parse_int(v); }},
      {"UCCL_IB_QPS_PER_CONNECTION", "1", "RC queue pairs per peer; large messages are striped",
       [](Config& c, const std::string& v) { c.ib_qps_per_connection = parse_int(v); }},
      {"UCCL_IB_TIMEOUT", "18", "IB ack timeout exponent (4.096us * 2^value)",
       [](Config& c, const std::string& v) { c.ib_timeout = parse_int(v); }},
      {"UCCL_IB_RETRY_CNT", "7", "IB transport retry count",
       [](Config& c, const std::string& v) { c.ib_retry_cnt = parse_int(v); }},
      {"UCCL_IB_TC", "0", "IB traffic class", [](Config& c, const std::string& v) { c.ib_tc = parse_int(v); }},
      {"UCCL_IB_SL", "0", "IB service level", [](Config& c, const std::string& v) { c.ib_sl = parse_int(v); }},
  };
  return table;
}

}  // namespace

const Config& config() {
  static const Config cfg = [] {
    Config c;
    for (const VarSpec& s : specs()) {
      const char* env = std::getenv(s.name);
      s.apply(c, env ? std::string(env) : std::string(s.def));
    }
    return c;
  }();
  return cfg;
}

std::vector<ConfigVar> config_table() {
  std::vector<ConfigVar> out;
  for (const VarSpec& s : specs()) {
    const char* env = std::getenv(s.name);
    out.push_back({s.name, env ? env : s.def, s.def, s.meaning, env != nullptr});
  }
  return out;
}

}  // namespace uccl
