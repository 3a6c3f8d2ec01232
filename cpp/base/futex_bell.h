// A doorbell for a thread that sleeps until another thread or process acts (core/idle_wait.h).
//
// The sleeper arms it (sets `sleeping`, reads `seq`) and then sleeps on the futex word `seq`
// for the value it read; the other side, after it wrote what the sleeper waits for, rings it:
// only while `sleeping` is set does it clear it, bump `seq` and FUTEX_WAKE. Each side fences
// between its store and its load (Dekker) and the futex sleeps only while `seq` still holds the
// value read when arming, so no wake-up is lost; a side nobody sleeps for pays a fence and one
// load per ring. Plain data with no constructor: it lives in zeroed shared memory as well as in
// a process's own (the futexes are shared ones, without FUTEX_PRIVATE_FLAG, as idle_sleep waits).
//
// Rung by: the shm transport's peer after each write into the ring segment (shm_segment.h), a
// staged receiver when it gives a shared slot back (staged_slots.h), the simulated device's
// stream worker after each task (sim_stream.h).
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdint>

namespace uccl {

struct FutexBell {
  std::atomic<uint32_t> seq;
  std::atomic<uint32_t> sleeping;

  // The sleeper: marks itself and returns the value of `seq` to sleep on. Whatever the ringer
  // did before it could see the mark, the sleeper's next look (after this) sees.
  uint32_t arm() {
    const uint32_t v = seq.load(std::memory_order_acquire);
    sleeping.store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return v;
  }
  void disarm() { sleeping.store(0, std::memory_order_relaxed); }
  uint32_t* word() { return reinterpret_cast<uint32_t*>(&seq); }
  // The other side, after its write: wakes every sleeper, if there is one.
  void ring() {
    std::atomic_thread_fence(std::memory_order_seq_cst);  // what we wrote, before we read `sleeping`
    if (sleeping.load(std::memory_order_relaxed) == 0 || sleeping.exchange(0) == 0) return;
    seq.fetch_add(1, std::memory_order_release);
    syscall(SYS_futex, word(), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
  }
};
static_assert(sizeof(FutexBell) == 8, "two words: shared layouts (shm_segment.h) place it");

}  // namespace uccl
