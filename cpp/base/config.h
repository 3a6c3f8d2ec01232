// The one place uccl reads its UCCL_* environment variables.
//
// Every variable is declared once in config.cc's table with its default and meaning; that
// table fills Config and is printed by `python -m uccl.info`. Nothing else calls getenv for a
// UCCL_* name (grep for it). Values are read once, at first use, so a process sees one config.
#pragma once

#include <string>
#include <vector>

namespace uccl {

enum class LogLevel : int { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

struct Config {
  LogLevel debug = LogLevel::kWarn;  // UCCL_DEBUG
  std::string debug_file;            // UCCL_DEBUG_FILE
  double timeout_s = 600;            // UCCL_TIMEOUT_S
  std::string transport = "auto";    // UCCL_TRANSPORT: auto|tcp|shm|verbs
  std::string algo = "auto";         // UCCL_ALGO
  std::string host_id;               // UCCL_HOST_ID
  bool progress_thread = true;       // UCCL_PROGRESS_THREAD
  double spin_us = 5000;             // UCCL_SPIN_US: a waiter spins this long before it sleeps
  int wait_yield = -1;               // UCCL_WAIT_YIELD: -1 auto (more ranks on the host than CPUs), 0, 1
  // tcp
  int nsocks_per_peer = 2;           // UCCL_NSOCKS_PERPEER
  std::string socket_ifname;         // UCCL_SOCKET_IFNAME (NCCL syntax)
  std::string socket_family;         // UCCL_SOCKET_FAMILY: "", AF_INET, AF_INET6
  size_t tcp_stripe_min_bytes = 256 << 10;  // UCCL_TCP_STRIPE_MIN_BYTES
  // shm
  size_t shm_ring_bytes = 4 << 20;   // UCCL_SHM_RING_BYTES
  bool shm_cma = true;               // UCCL_SHM_CMA
  // 128K: below ~1M the two-copy ring lost to a single process_vm_readv by 2x on the 2-core VM
  // (all_gather 1 MiB: 79 -> 38 us, Open MPI 43-50 us). Pulling data the sender had just
  // written kept the ring ahead below 256K (in-place all_reduce); since exchange steps push
  // (the sender copies from its own cache), 128K wins too: all_reduce 256 KiB 28 -> 18 us,
  // all_gather 256 KiB in place 14.6 -> 6.7 us. 64K lost (a direct all_reduce 64 KiB 13 -> 19 us).
  size_t shm_cma_min_bytes = 128 << 10;  // UCCL_SHM_CMA_MIN_BYTES
  size_t shm_cma_max_bytes = 16 << 20;   // UCCL_SHM_CMA_MAX_BYTES
  bool shm_cma_push = true;              // UCCL_SHM_CMA_PUSH
  // algorithms
  size_t small_msg_bytes = 64 << 10;  // UCCL_SMALL_MSG_BYTES: direct algorithms up to here
  // topology
  std::string topo_file;             // UCCL_TOPO_FILE
  std::string cluster;               // UCCL_CLUSTER
  // verbs
  std::string ib_hca;                // UCCL_IB_HCA
  int ib_gid_index = -1;             // UCCL_IB_GID_INDEX (-1: pick the RoCE v2 IPv4 GID)
  int ib_qps_per_connection = 1;     // UCCL_IB_QPS_PER_CONNECTION
  int ib_timeout = 18;               // UCCL_IB_TIMEOUT (4.096us * 2^timeout)
  int ib_retry_cnt = 7;              // UCCL_IB_RETRY_CNT
  int ib_tc = 0;                     // UCCL_IB_TC
  int ib_sl = 0;                     // UCCL_IB_SL
};

// The process-wide configuration, read from the environment on first call.
const Config& config();

struct ConfigVar {
  std::string name;
  std::string value;    // as set in the environment, or the default
  std::string def;
  std::string meaning;
  bool is_set;          // present in the environment
};
// Every UCCL_* variable with its value, default and meaning (for `python -m uccl.info`).
std::vector<ConfigVar> config_table();

}  // namespace uccl
