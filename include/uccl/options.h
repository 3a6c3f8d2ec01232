// Per-communicator options: each overrides the matching UCCL_* variable for one communicator.
//
// Public (include/uccl). Empty means "take the environment's value".
#pragma once

#include <string>

namespace uccl {

struct CommOptions {
  double timeout_s = -1;       // < 0: UCCL_TIMEOUT_S
  std::string transport;       // "", "auto", "tcp", "shm" (and later "verbs"): overrides UCCL_TRANSPORT
  std::string algorithm;       // "", "auto", "ring", "direct", ...: overrides UCCL_ALGO
  std::string socket_ifname;   // overrides UCCL_SOCKET_IFNAME for this communicator
  std::string name;            // shown in logs
};

}  // namespace uccl
