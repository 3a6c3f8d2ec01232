#include "topology/topo_value.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <cstdlib>

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

TopoValue scalar_from_text(const std::string& t) {
  TopoValue v;
  if (t.empty() || t == "null" || t == "~") return v;
  if (t == "true" || t == "false") {
    v.kind = TopoValue::Kind::kBool;
    v.b = t == "true";
    return v;
  }
  char* end = nullptr;
  double d = std::strtod(t.c_str(), &end);
  if (end && end != t.c_str() && *end == '\0') {
    v.kind = TopoValue::Kind::kNumber;
    v.num = d;
    return v;
  }
  v.kind = TopoValue::Kind::kString;
  v.str = t;
  return v;
}

// JSON, plus (relaxed = true, for YAML flow collections) bare unquoted words.
class JsonParser {
 public:
  JsonParser(const std::string& s, bool relaxed) : s_(s), relaxed_(relaxed) {}

  Result<TopoValue> parse_document() {
    TopoValue v;
    UCCL_RETURN_IF_ERROR(value(&v, 0));
    skip_ws();
    if (i_ != s_.size()) return error("trailing characters");
    return v;
  }

 private:
  Status error(const std::string& what) const {
    return InvalidArgument("topology file: " + what + " at offset " + std::to_string(i_));
  }
  void skip_ws() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  Status string(std::string* out) {
    const char q = s_[i_++];
    while (i_ < s_.size() && s_[i_] != q) {
      char c = s_[i_++];
      if (c == '\\' && i_ < s_.size()) {
        char e = s_[i_++];
        switch (e) {
          case 'n': c = '\n'; break;
          case 't': c = '\t'; break;
          case 'u': c = '?'; i_ = std::min(s_.size(), i_ + 4); break;  // names are ASCII
          default: c = e;
        }
      }
      *out += c;
    }
    if (i_ >= s_.size()) return error("unterminated string");
    ++i_;
    return Status::Ok();
  }
  Status value(TopoValue* v, int depth) {
    if (depth > 64) return error("nesting too deep");
    skip_ws();
    if (i_ >= s_.size()) return error("unexpected end");
    const char c = s_[i_];
    if (c == '{' || c == '[') {
      const bool is_map = c == '{';
      v->kind = is_map ? TopoValue::Kind::kMap : TopoValue::Kind::kList;
      ++i_;
      skip_ws();
      if (i_ < s_.size() && s_[i_] == (is_map ? '}' : ']')) {
        ++i_;
        return Status::Ok();
      }
      for (;;) {
        TopoValue item;
        std::string key;
        if (is_map) {
          skip_ws();
          TopoValue k;
          UCCL_RETURN_IF_ERROR(value(&k, depth + 1));
          key = k.as_string();
          skip_ws();
          if (i_ >= s_.size() || s_[i_] != ':') return error("expected ':'");
          ++i_;
        }
        UCCL_RETURN_IF_ERROR(value(&item, depth + 1));
        if (is_map) v->map.emplace_back(key, std::move(item));
        else v->list.push_back(std::move(item));
        skip_ws();
        if (i_ < s_.size() && s_[i_] == ',') {
          ++i_;
          continue;
        }
        if (i_ < s_.size() && s_[i_] == (is_map ? '}' : ']')) {
          ++i_;
          return Status::Ok();
        }
        return error(is_map ? "expected ',' or '}'" : "expected ',' or ']'");
      }
    }
    if (c == '"' || (relaxed_ && c == '\'')) {
      v->kind = TopoValue::Kind::kString;
      return string(&v->str);
    }
    // number, true/false/null, or (relaxed) a bare word
    size_t start = i_;
    while (i_ < s_.size() && !std::strchr(",]}:\n", s_[i_])) ++i_;
    // A bare word may contain ':' when not followed by a space (e.g. "mlx5_0:1").
    while (relaxed_ && i_ < s_.size() && s_[i_] == ':' && i_ + 1 < s_.size() && s_[i_ + 1] != ' ') {
      ++i_;
      while (i_ < s_.size() && !std::strchr(",]}:\n", s_[i_])) ++i_;
    }
    std::string word = s_.substr(start, i_ - start);
    while (!word.empty() && std::isspace(static_cast<unsigned char>(word.back()))) word.pop_back();
    if (word.empty()) return error("expected a value");
    *v = scalar_from_text(word);
    if (!relaxed_ && v->kind == TopoValue::Kind::kString) return error("unexpected word '" + word + "'");
    return Status::Ok();
  }

  const std::string& s_;
  bool relaxed_;
  size_t i_ = 0;
};

// ---- YAML subset ----------------------------------------------------------------------------

struct YLine {
  int indent;
  std::string text;
  int lineno;
};

std::string strip_comment(const std::string& line) {
  char quote = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '#' && (i == 0 || std::isspace(static_cast<unsigned char>(line[i - 1])))) {
      return line.substr(0, i);
    }
  }
  return line;
}

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

bool is_seq_item(const std::string& t) { return t == "-" || t.rfind("- ", 0) == 0; }

// Position of the ':' that separates a mapping key ("key: v" or "key:"), npos if none.
size_t key_colon(const std::string& t) {
  char quote = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    char c = t[i];
    if (quote) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == ':' && (i + 1 == t.size() || t[i + 1] == ' ')) {
      return i;
    } else if (c == '[' || c == '{') {
      return std::string::npos;
    }
  }
  return std::string::npos;
}

class YamlParser {
 public:
  explicit YamlParser(std::vector<YLine> lines) : l_(std::move(lines)) {}
  Result<TopoValue> parse_document() {
    if (l_.empty()) return TopoValue{};
    TopoValue v;
    UCCL_RETURN_IF_ERROR(block(l_[0].indent, &v));
    if (i_ != l_.size()) return error("unexpected indentation");
    return v;
  }

 private:
  Status error(const std::string& what) const {
    int line = i_ < l_.size() ? l_[i_].lineno : (l_.empty() ? 0 : l_.back().lineno);
    return InvalidArgument("topology file (YAML) line " + std::to_string(line) + ": " + what);
  }
  Status scalar(const std::string& t, TopoValue* v) {
    if (!t.empty() && (t[0] == '[' || t[0] == '{' || t[0] == '"' || t[0] == '\'')) {
      auto r = JsonParser(t, true).parse_document();
      if (!r.ok()) return error(r.status().message());
      *v = r.take();
      return Status::Ok();
    }
    *v = scalar_from_text(t);
    return Status::Ok();
  }
  Status block(int indent, TopoValue* v) {
    if (i_ >= l_.size()) return Status::Ok();
    if (is_seq_item(l_[i_].text)) return sequence(indent, v);
    if (key_colon(l_[i_].text) != std::string::npos) return mapping(indent, v);
    UCCL_RETURN_IF_ERROR(scalar(l_[i_].text, v));
    ++i_;
    return Status::Ok();
  }
  Status sequence(int indent, TopoValue* v) {
    v->kind = TopoValue::Kind::kList;
    while (i_ < l_.size() && l_[i_].indent == indent && is_seq_item(l_[i_].text)) {
      std::string rest = l_[i_].text == "-" ? "" : trim(l_[i_].text.substr(2));
      TopoValue item;
      if (rest.empty()) {
        ++i_;
        if (i_ < l_.size() && l_[i_].indent > indent) UCCL_RETURN_IF_ERROR(block(l_[i_].indent, &item));
      } else {
        // "- key: v" opens a mapping whose keys sit at the column after "- ".
        const int col = indent + static_cast<int>(l_[i_].text.size() - rest.size());
        l_[i_].indent = col;
        l_[i_].text = rest;
        UCCL_RETURN_IF_ERROR(block(col, &item));
      }
      v->list.push_back(std::move(item));
    }
    return Status::Ok();
  }
  Status mapping(int indent, TopoValue* v) {
    v->kind = TopoValue::Kind::kMap;
    while (i_ < l_.size() && l_[i_].indent == indent && !is_seq_item(l_[i_].text)) {
      const std::string& t = l_[i_].text;
      size_t colon = key_colon(t);
      if (colon == std::string::npos) return error("expected 'key: value'");
      std::string key = trim(t.substr(0, colon));
      if (key.size() >= 2 && (key[0] == '"' || key[0] == '\'')) key = key.substr(1, key.size() - 2);
      std::string rest = trim(t.substr(colon + 1));
      TopoValue item;
      ++i_;
      if (!rest.empty()) {
        UCCL_RETURN_IF_ERROR(scalar(rest, &item));
      } else if (i_ < l_.size() && (l_[i_].indent > indent || (l_[i_].indent == indent && is_seq_item(l_[i_].text)))) {
        UCCL_RETURN_IF_ERROR(block(l_[i_].indent, &item));
      }
      v->map.emplace_back(key, std::move(item));
    }
    if (i_ < l_.size() && l_[i_].indent > indent) return error("unexpected indentation");
    return Status::Ok();
  }

  std::vector<YLine> l_;
  size_t i_ = 0;
};

}  // namespace

Result<TopoValue> parse_json(const std::string& text) { return JsonParser(text, false).parse_document(); }

Result<TopoValue> parse_yaml(const std::string& text) {
  std::vector<YLine> lines;
  size_t pos = 0;
  int lineno = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    std::string raw = text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? text.size() + 1 : nl + 1;
    ++lineno;
    if (raw.find('\t') != std::string::npos && trim(raw).size() && raw.find_first_not_of(" \t") > raw.find('\t'))
      return InvalidArgument("topology file (YAML) line " + std::to_string(lineno) + ": tabs are not allowed for indentation");
    std::string s = strip_comment(raw);
    std::string t = trim(s);
    if (t.empty() || t == "---") continue;
    lines.push_back({static_cast<int>(s.find_first_not_of(' ')), t, lineno});
  }
  return YamlParser(std::move(lines)).parse_document();
}

Result<TopoValue> parse_topo_text(const std::string& text, const std::string& filename) {
  auto ends_with = [&](const char* suf) {
    std::string s(suf);
    return filename.size() >= s.size() && filename.compare(filename.size() - s.size(), s.size(), s) == 0;
  };
  if (ends_with(".yaml") || ends_with(".yml")) return parse_yaml(text);
  if (ends_with(".json")) return parse_json(text);
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && (text[first] == '{' || text[first] == '[')) return parse_json(text);
  return parse_yaml(text);
}

}  // namespace uccl
