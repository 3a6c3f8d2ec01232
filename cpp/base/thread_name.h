// Names the calling thread (what top -H, perf and /proc/<pid>/task/<tid>/comm show).
//
// Why: a rank's process runs its caller's thread, the engine's progress thread, the simulated
// device's stream workers, the agreement server and the store's server (uccl-progress,
// uccl-sim-d<N>, uccl-agreement, uccl-store); on a busy machine the question is which of
// them spends the CPU (benchmarks/RESULTS.md: a staged run whose copies were slow), and unnamed
// they all read "python". Linux keeps 15 characters; longer names are cut, never refused.
#pragma once

#include <pthread.h>

#include <cstring>

namespace uccl {

inline void name_this_thread(const char* name) {
  char buf[16];
  std::strncpy(buf, name, sizeof(buf) - 1);
  buf[sizeof(buf) - 1] = '\0';
  pthread_setname_np(pthread_self(), buf);
}

}  // namespace uccl
