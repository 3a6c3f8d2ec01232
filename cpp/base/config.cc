#include "base/config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace uccl {
namespace {

// Every declared variable, in registration order (a file's variables in declaration order).
std::vector<const ConfigVar*>& registry() {
  static std::vector<const ConfigVar*> vars;
  return vars;
}
std::mutex& registry_mu() {
  static std::mutex mu;
  return mu;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n"), e = s.find_last_not_of(" \t\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// The whole text as a number, or false.
bool to_double(const std::string& text, double* out) {
  const std::string t = trim(text);
  if (t.empty()) return false;
  char* end = nullptr;
  errno = 0;
  *out = std::strtod(t.c_str(), &end);
  return errno == 0 && end && *end == '\0' && std::isfinite(*out);
}

}  // namespace

ConfigVar::ConfigVar(const char* section, const char* name, const char* def, const char* meaning, Scope scope)
    : section_(section), name_(name), def_(def), meaning_(meaning), scope_(scope) {
  std::lock_guard<std::mutex> lock(registry_mu());
  registry().push_back(this);
}

void ConfigVar::load() const {
  std::call_once(once_, [this] {
    auto* self = const_cast<ConfigVar*>(this);
    Status d = self->parse(def_);
    if (!d.ok()) {  // a bug in the declaration, not the user's doing
      error_ = Internal(std::string(name_) + ": the declared default '" + def_ + "' is invalid: " + d.message());
      return;
    }
    const char* env = std::getenv(name_);
    if (!env) return;
    Status s = self->parse(env);
    if (!s.ok()) {
      error_ = InvalidArgument(std::string(name_) + "='" + env + "': expected " + s.message() + " (using the default, " +
                               (*def_ ? std::string(def_) : std::string("unset")) + ")");  // parse() left it
    }
  });
}

Status ConfigVar::error() const {
  load();
  return error_;
}

Setting<int>::Parser int_in(int lo, int hi) {
  return [lo, hi](const std::string& text, int* out) -> std::string {
    double v = 0;
    if (to_double(text, &v) && v == std::floor(v) && v >= lo && v <= hi) {
      *out = static_cast<int>(v);
      return "";
    }
    return "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
  };
}

Setting<size_t>::Parser bytes_at_least(size_t lo) {
  return [lo](const std::string& text, size_t* out) -> std::string {
    const std::string expected =
        "a byte count of at least " + std::to_string(lo) + " (a number, optionally with a K, M or G suffix)";
    std::string t = trim(text);
    double mult = 1;
    if (!t.empty()) {
      const char c = t.back();
      if (c == 'k' || c == 'K') mult = 1024.0;
      if (c == 'm' || c == 'M') mult = 1024.0 * 1024;
      if (c == 'g' || c == 'G') mult = 1024.0 * 1024 * 1024;
      if (mult > 1) t.pop_back();
    }
    double v = 0;
    if (!to_double(t, &v) || v < 0 || v * mult < static_cast<double>(lo) || v * mult > 1e18) return expected;
    *out = static_cast<size_t>(v * mult);
    return "";
  };
}

Setting<size_t>::Parser bytes_or_auto(size_t lo) {
  auto bytes = bytes_at_least(std::max<size_t>(lo, 1));
  return [bytes](const std::string& text, size_t* out) -> std::string {
    if (trim(text) == "auto") {
      *out = 0;
      return "";
    }
    std::string expected = bytes(text, out);
    return expected.empty() ? "" : "auto or " + expected;
  };
}

Setting<bool>::Parser boolean() {
  return [](const std::string& text, bool* out) -> std::string {
    std::string t = trim(text);
    std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
    if (t == "1" || t == "true" || t == "yes" || t == "on") *out = true;
    else if (t.empty() || t == "0" || t == "false" || t == "no" || t == "off") *out = false;
    else return "a boolean (1/0, true/false, yes/no, on/off)";
    return "";
  };
}

Setting<double>::Parser number_at_least(double lo) {
  return [lo](const std::string& text, double* out) -> std::string {
    double v = 0;
    if (to_double(text, &v) && v >= lo) {
      *out = v;
      return "";
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, "a number >= %g", lo);
    return buf;
  };
}

Setting<double>::Parser number_above(double lo) {
  return [lo](const std::string& text, double* out) -> std::string {
    double v = 0;
    if (to_double(text, &v) && v > lo) {
      *out = v;
      return "";
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, "a number above %g", lo);
    return buf;
  };
}

Setting<std::string>::Parser any_text() {
  return [](const std::string& text, std::string* out) -> std::string {
    *out = text;
    return "";
  };
}

Setting<std::string>::Parser one_of(std::vector<std::string> choices) {
  return [choices](const std::string& text, std::string* out) -> std::string {
    const std::string t = trim(text);
    if (std::find(choices.begin(), choices.end(), t) != choices.end()) {
      *out = t;
      return "";
    }
    std::string list;
    for (auto& c : choices) list += (list.empty() ? "" : ", ") + (c.empty() ? std::string("(empty)") : c);
    return "one of " + list;
  };
}

const DoubleSetting kTimeoutS("general", "UCCL_TIMEOUT_S", "600",
                              "default timeout in seconds for every wait (connect, collectives, store)",
                              number_above(0));

namespace {

// The table's order: general first, then the sections by name; names in order inside one
// (independent of the order in which the declaring files happen to be initialized).
std::vector<const ConfigVar*> sorted_vars() {
  std::vector<const ConfigVar*> vars;
  {
    std::lock_guard<std::mutex> lock(registry_mu());
    vars = registry();
  }
  auto rank = [](const ConfigVar* v) { return std::string(v->section()) == "general" ? std::string() : v->section(); };
  std::sort(vars.begin(), vars.end(), [&](const ConfigVar* a, const ConfigVar* b) {
    return rank(a) != rank(b) ? rank(a) < rank(b) : std::strcmp(a->name(), b->name()) < 0;
  });
  return vars;
}

}  // namespace

Status config_status() {
  std::string bad;
  Code code = Code::kOk;
  for (const ConfigVar* v : sorted_vars()) {
    Status s = v->error();
    if (s.ok()) continue;
    bad += (bad.empty() ? "" : "; ") + s.message();
    if (code != Code::kInternal) code = s.code();
  }
  return bad.empty() ? Status::Ok() : Status(code, "invalid configuration: " + bad);
}

std::vector<ConfigRow> config_table() {
  std::vector<ConfigRow> out;
  for (const ConfigVar* v : sorted_vars()) {
    const char* env = std::getenv(v->name());
    Status s = v->error();
    const std::string value = env && v->secret() ? std::string("(set, hidden)") : env ? env : v->def();
    out.push_back({v->section(), v->name(), value, v->def(), v->meaning(), env != nullptr,
                   s.ok() ? std::string() : s.message(), v->scope() == Scope::kJob});
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> job_settings() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const ConfigVar* v : sorted_vars())
    if (v->scope() == Scope::kJob) out.emplace_back(v->name(), v->value_text());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace uccl
