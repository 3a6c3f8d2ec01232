// A tiny document tree for topology files: JSON, and a simple subset of YAML.
//
// Why not a library: the topology file is small and written by hand or by the testbed, and
// the build must not fetch anything. The YAML subset covers what such a file needs: nested
// block mappings and sequences by indentation ("key: value", "- item", "- key: value"),
// inline flow lists/maps ([a, b], {k: v}) parsed as JSON-ish flow, scalars (numbers, bools,
// quoted or bare strings) and '#' comments. Anchors, multi-line scalars and tags are not.
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
