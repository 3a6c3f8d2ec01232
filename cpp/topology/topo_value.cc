// Topology file documents: JSON through nlohmann-json (strict JSON, errors with the byte
// offset), YAML through yaml-cpp (errors with line and column); both become a TopoValue.
#include "topology/topo_value.h"

#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

namespace uccl {

const TopoValue* TopoValue::get(const std::string& key) const {
  if (kind != Kind::kMap) return nullptr;
  for (auto& [k, v] : map)
    if (k == key) return &v;
  return nullptr;
}

std::string TopoValue::as_string(const std::string& def) const {
  switch (kind) {
    case Kind::kString: return str;
    case Kind::kBool: return b ? "true" : "false";
    case Kind::kNumber: {
      char buf[64];
      snprintf(buf, sizeof buf, "%g", num);
      return buf;
    }
    default: return def;
  }
}

double TopoValue::as_number(double def) const {
  if (kind == Kind::kNumber) return num;
  if (kind == Kind::kString) {
    char* end = nullptr;
    double v = std::strtod(str.c_str(), &end);
    if (end && end != str.c_str() && *end == '\0') return v;
  }
  return def;
}

namespace {

using Json = nlohmann::ordered_json;  // keys in file order, for messages

TopoValue from_json(const Json& j) {
  TopoValue v;
  switch (j.type()) {
    case Json::value_t::boolean:
      v.kind = TopoValue::Kind::kBool;
      v.b = j.get<bool>();
      break;
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float:
      v.kind = TopoValue::Kind::kNumber;
      v.num = j.get<double>();
      break;
    case Json::value_t::string:
      v.kind = TopoValue::Kind::kString;
      v.str = j.get<std::string>();
      break;
    case Json::value_t::array:
      v.kind = TopoValue::Kind::kList;
      for (const Json& e : j) v.list.push_back(from_json(e));
      break;
    case Json::value_t::object:
      v.kind = TopoValue::Kind::kMap;
      for (auto it = j.begin(); it != j.end(); ++it) v.map.emplace_back(it.key(), from_json(it.value()));
      break;
    default:  // null, discarded
      break;
  }
  return v;
}

// A YAML scalar: quoted ones are strings; plain ones follow YAML's core schema for null,
// booleans and numbers, anything else is a string.
TopoValue from_yaml_scalar(const YAML::Node& n) {
  TopoValue v;
  const std::string& t = n.Scalar();
  if (n.Tag() != "!") {  // "!" marks a quoted scalar
    if (t.empty() || t == "~" || t == "null" || t == "Null" || t == "NULL") return v;
    if (t == "true" || t == "True" || t == "TRUE" || t == "false" || t == "False" || t == "FALSE") {
      v.kind = TopoValue::Kind::kBool;
      v.b = t[0] == 't' || t[0] == 'T';
      return v;
    }
    char* end = nullptr;
    const double d = std::strtod(t.c_str(), &end);
    if (end && end != t.c_str() && *end == '\0') {
      v.kind = TopoValue::Kind::kNumber;
      v.num = d;
      return v;
    }
  }
  v.kind = TopoValue::Kind::kString;
  v.str = t;
  return v;
}

TopoValue from_yaml(const YAML::Node& n) {
  TopoValue v;
  switch (n.Type()) {
    case YAML::NodeType::Scalar: return from_yaml_scalar(n);
    case YAML::NodeType::Sequence:
      v.kind = TopoValue::Kind::kList;
      for (const YAML::Node& e : n) v.list.push_back(from_yaml(e));
      break;
    case YAML::NodeType::Map:
      v.kind = TopoValue::Kind::kMap;
      for (const auto& kv : n) v.map.emplace_back(kv.first.as<std::string>(), from_yaml(kv.second));
      break;
    default:  // null, undefined
      break;
  }
  return v;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Result<TopoValue> parse_json(const std::string& text) {
  try {
    return from_json(Json::parse(text));
  } catch (const Json::exception& e) {
    return InvalidArgument(std::string("topology file (JSON): ") + e.what());
  }
}

Result<TopoValue> parse_yaml(const std::string& text) {
  try {
    return from_yaml(YAML::Load(text));
  } catch (const YAML::Exception& e) {
    return InvalidArgument(std::string("topology file (YAML): ") + e.what());
  }
}

Result<TopoValue> parse_topo_text(const std::string& text, const std::string& filename) {
  if (ends_with(filename, ".yaml") || ends_with(filename, ".yml")) return parse_yaml(text);
  if (ends_with(filename, ".json")) return parse_json(text);
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && (text[first] == '{' || text[first] == '[')) return parse_json(text);
  return parse_yaml(text);
}

}  // namespace uccl
