// Shared bits of the verbs VM tests (doctest): the pair runner for checked rank bodies, data
// patterns, scenario declarations.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "test_util.h"
#include "verbs_pair.h"

namespace vmtest {

// run_pair() with rank bodies that use doctest checks: a failed check (or REQUIRE) in a rank
// becomes that rank's exit code, which run_pair() reports; messages name the rank.
inline bool run_checked_pair(const std::string& hca0, const std::string& hca1, uccl::VerbsOptions options,
                             int (*body)(Rank&), int timeout_s = 120, int killed = -1, int fail_lane_rank = -1) {
  return run_pair(
      hca0, hca1, options,
      [body](Rank& r) {
        INFO("rank " << r.rank);
        return uccl_test::child_exit_code([&] { return body(r); });
      },
      timeout_s, killed, fail_lane_rank);
}

inline uint8_t pattern(size_t i, uint32_t seed) { return static_cast<uint8_t>((i * 2654435761u + seed) >> 7); }
inline void fill(void* p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; ++i) static_cast<uint8_t*>(p)[i] = pattern(i, seed);
}
inline bool check_fill(const void* p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; ++i)
    if (static_cast<const uint8_t*>(p)[i] != pattern(i, seed)) return false;
  return true;
}
inline uccl::Envelope env(uint64_t op, uint32_t step = 0, uint64_t count = 0) {
  uccl::Envelope e;
  e.op_seq = op;
  e.step = step;
  e.count = count;
  e.coll = 8;  // send_recv
  return e;
}

// verbs_vmtest_failures.cc
bool availability_checks();
int mr_cache(Rank& r);
int killed_receiver(Rank& r);
int killed_sender(Rank& r);
int abort_one(Rank& r);
int retry_exhausted(Rank& r);

}  // namespace vmtest
