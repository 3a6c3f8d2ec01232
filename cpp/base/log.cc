#include "base/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <mutex>

namespace uccl {

static std::atomic<int> g_rank{-1};

bool log_enabled(LogLevel level) { return static_cast<int>(level) <= static_cast<int>(config().debug); }

void log_set_rank(int rank) {
  int expected = -1;
  g_rank.compare_exchange_strong(expected, rank);
}

void log_message(LogLevel level, const char* fmt, ...) {
  if (!log_enabled(level)) return;
  static std::mutex mu;
  static FILE* out = [] {
    const std::string& path = config().debug_file;
    if (path.empty()) return stderr;
    FILE* f = std::fopen(path.c_str(), "a");
    return f ? f : stderr;
  }();
  static const char* names[] = {"", "WARN", "INFO", "TRACE"};
  char msg[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(out, "[uccl rank %d pid %d] %s %s\n", g_rank.load(), static_cast<int>(getpid()),
               names[static_cast<int>(level)], msg);
  std::fflush(out);
}

}  // namespace uccl
