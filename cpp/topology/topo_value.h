// The document tree of a topology file (UCCL_TOPO_FILE), JSON or YAML.
//
// Parsing is left to maintained libraries (Debian packages, found by CMake): nlohmann-json for
// JSON (strict) and yaml-cpp for YAML; this small tree is what the topology code reads, so
// neither library's types leak past topo_value.cc. YAML scalars follow the core schema: plain
// null/true/false/numbers are typed, quoted scalars stay strings.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "uccl/status.h"

namespace uccl {

struct TopoValue {
  enum class Kind { kNull, kBool, kNumber, kString, kList, kMap };
  Kind kind = Kind::kNull;
  bool b = false;
  double num = 0;
  std::string str;
  std::vector<TopoValue> list;
  std::vector<std::pair<std::string, TopoValue>> map;  // insertion order kept for messages

  const TopoValue* get(const std::string& key) const;  // nullptr if absent or not a map
  std::string as_string(const std::string& def = "") const;  // numbers/bools as text too
  double as_number(double def = 0) const;
  bool is_list() const { return kind == Kind::kList; }
  bool is_map() const { return kind == Kind::kMap; }
};

Result<TopoValue> parse_json(const std::string& text);
Result<TopoValue> parse_yaml(const std::string& text);
// By extension (.yaml/.yml -> YAML) or, failing that, by the first non-blank character.
Result<TopoValue> parse_topo_text(const std::string& text, const std::string& filename);

}  // namespace uccl
