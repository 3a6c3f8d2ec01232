// How a thread that drives an engine waits while nothing moves (issue 18, "when the CPU is busy").
//
// Ranks share their cores with data loaders, Python threads, other jobs and, oversubscribed,
// with each other. Whatever a waiting rank does costs the rank it waits for when both want the
// same core, and a rank that gives its core away pays for it: on the loaded 2-core VM a rank
// woken from a sleep waited 100-400 us for a core again (8-byte all_reduce 230-400 us when
// every wait slept at once, 0.7-1.8 us spinning first), and sched_yield beside a busy loop
// hands it a whole time slice (the old 5 us spin then yield: 4-30 us with 1-3 busy loops beside
// two ranks, Open MPI 0.5 us). So, like Open MPI's shared-memory path, a waiter:
//   1. spins (progress passes) for UCCL_SPIN_US (auto: 5 ms, longer than a scheduler time slice, so a
//      peer preempted once does not cost a sleep and a wake-up): the peer answers a small
//      message in 1-2 us when it runs, and a rank that keeps its core gets its fair share of it.
//      It calls sched_yield between passes instead where spinning would keep the peer off the
//      core it needs: with more ranks on the machine than cores (UCCL_WAIT_YIELD auto, as Open MPI
//      does when oversubscribed), or when the shm peer last waited on this very cpu (unpinned
//      ranks the scheduler put on one core: each spinning would stall the other for a slice);
//   2. then sleeps until the peer acts: every pending endpoint arms what wakes it (shm: a futex
//      doorbell in the segment that the peer rings after each write while we sleep; tcp: the
//      sockets' epoll fd), one more progress pass catches what came meanwhile, and the thread
//      blocks in futex_waitv / poll, bounded by milliseconds so that deadlines, liveness checks
//      (a dead peer rings nothing) and new connections still get their look. A rank waiting at a
//      barrier for seconds costs no CPU, and it wakes the moment the data is there.
// An adaptive spin budget (halved while waits ended only after a sleep) was tried and dropped:
// under load the sleeps it led to cost more (a wake-up waits for a core) than the spinning.
//
// The caller drives progress itself while it waits (Engine::wait); the background progress
// thread sleeps meanwhile (see engine.h), so no second thread competes for the lock or a core.
#pragma once

#include <cstdint>
#include <string>

#include "topology/topology.h"
#include "transports/transport.h"

namespace uccl {

// Sleeps until an fd of ws is readable, a futex word of ws changes or is woken, or timeout_s
// passes (also on a spurious wake-up or a signal: the caller just makes its next pass).
// Mixed fds and futexes, or an endpoint that can only be polled: at most 100 us.
void idle_sleep(const WaitSet& ws, double timeout_s);

// The waiting policy (UCCL_SPIN_US, UCCL_WAIT_YIELD), the same for every engine of the process.
struct IdlePolicy {
  double spin_s;  // spin this long before sleeping
  bool yield;     // sched_yield between the passes of the spin
};
IdlePolicy idle_policy();
// The CPU limit of the process's cgroup in cores (cgroup v1 cpu.cfs_quota_us / cpu.cfs_period_us,
// v2 cpu.max), or 0 when there is none. `proc_cgroup` is /proc/self/cgroup's text, `root` where
// the cgroup filesystems are mounted (/sys/fs/cgroup); parameters so that tests can fake both.
// Why: under a quota, spinning is paid out of the same budget as the rank's compute. The
// planner's validation runs (0.1 cores per rank) measured two plans 38-46% slower than
// predicted because waits spun 5 ms each; with UCCL_SPIN_US=0 they were not (uccl/parallel/
// RESULTS.md). So UCCL_SPIN_US=auto spins only while the process has whole cores of its own.
double cgroup_cpu_limit(const std::string& proc_cgroup, const std::string& root);
// Ranks of a communicator that share this rank's CPUs: those of its host and those on the same
// kernel (PeerInfo::machine), whichever are more. The emulated testbed's hosts are network
// namespaces of one 2-core kernel: counting the host's 2 ranks, 8 ranks spun (none yielded) and
// a 1 MiB all_reduce waited for the 4 ms scheduler tick, 40-80 ms against 17-19 with yielding.
int cpu_sharers(const Topology& topo, int rank);
// With more of them (the most any communicator of the process noted) than online CPUs,
// UCCL_WAIT_YIELD=auto yields while spinning; each rank counts 1 + the host threads of its
// device streams (base/device.h: device_host_threads(), the simulated device's workers).
void note_cpu_sharers(int n);

}  // namespace uccl
