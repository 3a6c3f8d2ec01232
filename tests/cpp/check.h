// Minimal test macros for the C++ unit tests (no framework dependency to install in CI).
#pragma once

#include <cstdio>
#include <cstdlib>

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

#define CHECK_OK(expr)                                                         \
  do {                                                                         \
    ::uccl::Status _st = (expr);                                               \
    if (!_st.ok()) {                                                           \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr, \
                   _st.to_string().c_str());                                   \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)
