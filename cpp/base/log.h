// Logging to stderr with a rank prefix, filtered by UCCL_DEBUG=WARN|INFO|TRACE.
#pragma once

#include <string>

#include "base/config.h"

namespace uccl {

bool log_enabled(LogLevel level);
// Sets the "[uccl rank N]" prefix (the global rank of the first communicator in the process).
void log_set_rank(int rank);
void log_message(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
// A duration for messages: "1 s", "2.5 s", "0.001 s" (what std::to_string would write "1.000000").
std::string seconds_text(double s);

#define UCCL_WARN(...) ::uccl::log_message(::uccl::LogLevel::kWarn, __VA_ARGS__)
#define UCCL_INFO(...)                                                              \
  do {                                                                              \
    if (::uccl::log_enabled(::uccl::LogLevel::kInfo)) ::uccl::log_message(::uccl::LogLevel::kInfo, __VA_ARGS__); \
  } while (0)
#define UCCL_TRACE(...)                                                             \
  do {                                                                              \
    if (::uccl::log_enabled(::uccl::LogLevel::kTrace)) ::uccl::log_message(::uccl::LogLevel::kTrace, __VA_ARGS__); \
  } while (0)

}  // namespace uccl
