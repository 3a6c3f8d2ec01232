// UCCL_* environment variables: each one is declared once, next to the code that uses it.
//
//   // transports/tcp/tcp_transport.cc
//   const IntSetting kNsocksPerPeer("tcp", "UCCL_NSOCKS_PERPEER", "2",
//                                   "TCP sockets per peer; ...", int_in(1, 64));
//   ... kNsocksPerPeer.get() ...
//
// Why declarations and not one central struct: a transport (or any part) brings its own knobs
// with its folder, and adding one touches one file. Every declared variable registers itself,
// so the table that `python -m uccl.info` and the README print (config_table()) is assembled
// from all of them. The default is written once, as text, in the declaration: the table shows
// that text and the value is parsed from it by the same parser as the environment's.
//
// Values are read once per variable, at first use, so a process sees one configuration.
// A value that does not parse is refused: the variable keeps its default, and config_status()
// (checked by Communicator::create) names the variable, the text and what was expected. No
// other code calls getenv for a UCCL_* name (grep for it).
//
// A setting that decides what the ranks exchange (which algorithm, how a collective is cut, the
// link probe) is declared Scope::kJob: every rank of a communicator must have the same value.
// Each rank publishes those values with its PeerInfo and a rank refuses to connect to a peer
// whose values differ (a MismatchError naming the setting), because otherwise the two would run
// different schedules: a hang, or worse, blocks of one algorithm combined as another's.
//
// Declare settings at namespace scope and do not call get() from another static initializer
// (the declaring file's objects may not be constructed yet).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "uccl/status.h"

namespace uccl {

enum class LogLevel : int { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

// kRank: each process may set its own value. kJob: every rank of a communicator must agree.
enum class Scope : uint8_t { kRank, kJob };

class ConfigVar {
 public:
  // `section` groups the table (general first, then the other sections; names in order).
  ConfigVar(const char* section, const char* name, const char* def, const char* meaning, Scope scope = Scope::kRank);
  ConfigVar(const ConfigVar&) = delete;
  ConfigVar& operator=(const ConfigVar&) = delete;
  const char* section() const { return section_; }
  const char* name() const { return name_; }
  const char* def() const { return def_; }
  const char* meaning() const { return meaning_; }
  // A secret (a key): config_table() shows only whether it is set, never its text.
  virtual bool secret() const { return false; }
  Scope scope() const { return scope_; }
  // The value in force (after load), as canonical text: equal texts <=> equal values ("64K" and
  // "65536" give the same text).
  virtual std::string value_text() const = 0;
  // Why the environment's text was refused (Ok when unset or valid). Loads the variable.
  Status error() const;

 protected:
  virtual ~ConfigVar() = default;
  // Parses `text` into the value, or says what was expected ("an integer from 1 to 64").
  virtual Status parse(const std::string& text) = 0;
  // Once per variable: the default, then the environment's text when it parses.
  void load() const;

 private:
  const char* section_;
  const char* name_;
  const char* def_;
  const char* meaning_;
  const Scope scope_;
  mutable std::once_flag once_;
  mutable Status error_;
};

// A typed setting: the parser turns text into T or explains what it expected.
template <class T>
class Setting : public ConfigVar {
 public:
  // Returns "" when the text is valid, else what was expected.
  using Parser = std::function<std::string(const std::string& text, T* out)>;
  Setting(const char* section, const char* name, const char* def, const char* meaning, Parser parser,
          Scope scope = Scope::kRank)
      : ConfigVar(section, name, def, meaning, scope), parser_(std::move(parser)) {}
  const T& get() const {
    load();
    return value_;
  }
  // The declared default, parsed (for option structs whose fields start at the default).
  T default_value() const {
    T v{};
    parser_(def(), &v);
    return v;
  }
  std::string value_text() const override {
    const T& v = get();
    if constexpr (std::is_same_v<T, std::string>) return v;
    else if constexpr (std::is_enum_v<T>) return std::to_string(static_cast<std::underlying_type_t<T>>(v));
    else return std::to_string(v);
  }

 private:
  Status parse(const std::string& text) override {
    T v{};
    std::string expected = parser_(text, &v);
    if (!expected.empty()) return InvalidArgument(expected);
    value_ = std::move(v);
    return Status::Ok();
  }
  Parser parser_;
  T value_{};
};

using IntSetting = Setting<int>;
using BytesSetting = Setting<size_t>;
using BoolSetting = Setting<bool>;
using DoubleSetting = Setting<double>;
using TextSetting = Setting<std::string>;
// A text setting whose value is never printed (UCCL_JOB_KEY).
class SecretSetting : public Setting<std::string> {
 public:
  using Setting<std::string>::Setting;
  bool secret() const override { return true; }
};

// Parsers. Every one accepts surrounding spaces and refuses anything else it does not know.
Setting<int>::Parser int_in(int lo, int hi);
// Plain numbers or K/M/G suffixes (binary): "4M", "256K", "1048576".
Setting<size_t>::Parser bytes_at_least(size_t lo);
// "auto" (stored as 0: the code that reads the setting picks the value) or as bytes_at_least(lo).
Setting<size_t>::Parser bytes_or_auto(size_t lo);
// 1/0, true/false, yes/no, on/off (any case); empty is false.
Setting<bool>::Parser boolean();
Setting<double>::Parser number_above(double lo);
Setting<double>::Parser number_at_least(double lo);
Setting<std::string>::Parser any_text();
// One of `choices` (exact); "" is accepted only when listed.
Setting<std::string>::Parser one_of(std::vector<std::string> choices);

// The general settings, used on several floors.
extern const DoubleSetting kTimeoutS;  // UCCL_TIMEOUT_S

// Ok, or InvalidArgument naming every variable whose text was refused and what it expected.
Status config_status();

struct ConfigRow {
  std::string section;
  std::string name;
  std::string value;    // as set in the environment, or the default
  std::string def;
  std::string meaning;
  bool is_set;          // present in the environment
  std::string error;    // why the environment's text was refused ("" when valid)
  bool job = false;     // Scope::kJob: the same on every rank
};
// Every declared UCCL_* variable (for `python -m uccl.info` and the README).
std::vector<ConfigRow> config_table();
// The Scope::kJob variables' names and value_text(), sorted by name.
std::vector<std::pair<std::string, std::string>> job_settings();

}  // namespace uccl
