#include "base/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace uccl {

namespace {

Setting<LogLevel>::Parser log_level() {
  return [](const std::string& text, LogLevel* out) -> std::string {
    std::string name;
    std::string expected = one_of({"NONE", "WARN", "INFO", "TRACE"})(text, &name);
    if (!expected.empty()) return expected;
    *out = name == "NONE" ? LogLevel::kNone : name == "INFO" ? LogLevel::kInfo : name == "TRACE" ? LogLevel::kTrace
                                                                                                 : LogLevel::kWarn;
    return "";
  };
}

const Setting<LogLevel> kDebug("general", "UCCL_DEBUG", "WARN",
                               "log level on stderr: NONE, WARN, INFO (transport per peer, algorithm per op), TRACE",
                               log_level());
const TextSetting kDebugFile("general", "UCCL_DEBUG_FILE", "", "write logs to this file instead of stderr", any_text());

std::atomic<int> g_rank{-1};

}  // namespace

bool log_enabled(LogLevel level) { return static_cast<int>(level) <= static_cast<int>(kDebug.get()); }

void log_set_rank(int rank) {
  int expected = -1;
  g_rank.compare_exchange_strong(expected, rank);
}

void log_message(LogLevel level, const char* fmt, ...) {
  if (!log_enabled(level)) return;
  static std::mutex mu;
  static FILE* out = [] {
    const std::string& path = kDebugFile.get();
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
  // Wall-clock time to the millisecond: lines of several ranks (files or hosts) can be put in
  // one order, which a failure's story across ranks needs.
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  tm t{};
  gmtime_r(&ts.tv_sec, &t);
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(out, "[uccl rank %d pid %d %02d:%02d:%02d.%03ld] %s %s\n", g_rank.load(), static_cast<int>(getpid()),
               t.tm_hour, t.tm_min, t.tm_sec, ts.tv_nsec / 1000000, names[static_cast<int>(level)], msg);
  std::fflush(out);
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", s);
  return buf;
}

}  // namespace uccl
