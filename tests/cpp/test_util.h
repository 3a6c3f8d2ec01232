// What the C++ tests share on top of doctest (Debian doctest-dev, <doctest/doctest.h>):
//  * CHECK_OK / REQUIRE_OK: a uccl::Status (or an expression giving one) is ok, else the
//    failure shows the expression and the status text;
//  * child_exit_code: the end of a forked child rank. doctest counts a child's failed checks
//    in the child's memory only, so the child turns them into its exit code, which the parent
//    checks; a failed REQUIRE in the child (an exception) ends it the same way.
//  * count_wrong: one assertion for a whole buffer;
//  * run_guarded: the body of a rank run as a thread: a failed REQUIRE there (an exception)
//    ends that thread only; doctest has reported it already.
// The main() is tests/cpp/doctest_main.cc, linked into every test.
#pragma once

#include <doctest/doctest.h>

#include <cstddef>
#include <functional>

#include "uccl/status.h"

#define CHECK_OK(expr)                                                                     \
  do {                                                                                     \
    const ::uccl::Status uccl_test_status_ = (expr);                                       \
    CHECK_MESSAGE(uccl_test_status_.ok(), #expr " failed: " << uccl_test_status_.to_string()); \
  } while (0)

#define REQUIRE_OK(expr)                                                                     \
  do {                                                                                       \
    const ::uccl::Status uccl_test_status_ = (expr);                                         \
    REQUIRE_MESSAGE(uccl_test_status_.ok(), #expr " failed: " << uccl_test_status_.to_string()); \
  } while (0)

namespace uccl_test {

// Failed checks so far in this process (counted by a doctest listener).
int failed_checks();

// Runs a forked child's body and returns the exit code for _exit(): the body's own code, or 1
// when one of its checks failed or a REQUIRE ended it.
inline int child_exit_code(const std::function<int()>& body) {
  const int before = failed_checks();
  int rc = 1;
  try {
    rc = body();
  } catch (const doctest::detail::TestFailureException&) {  // a failed REQUIRE
    rc = 1;
  }
  if (rc == 0 && failed_checks() != before) rc = 1;
  return rc;
}

// How many of the indices 0..n-1 fail ok(i): CHECK(count_wrong(n, ...) == 0) checks a whole
// buffer in one assertion (one per element would be millions for the large ones).
template <class F>
size_t count_wrong(size_t n, F ok) {
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += !ok(i);
  return wrong;
}

inline void run_guarded(const std::function<void()>& body) {
  try {
    body();
  } catch (const doctest::detail::TestFailureException&) {  // reported by doctest already
  }
}

}  // namespace uccl_test
