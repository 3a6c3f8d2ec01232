#include "transports/verbs/verbs_hca_spec.h"

#include <cstdlib>

namespace uccl {

HcaSpec HcaSpec::parse(const std::string& text) {
  HcaSpec s;
  size_t i = 0;
  if (i < text.size() && text[i] == '^') s.exclude = true, ++i;
  if (i < text.size() && text[i] == '=') s.exact = true, ++i;
  while (i <= text.size()) {
    size_t comma = text.find(',', i);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(i, comma - i);
    // Tolerate blanks around names ("mlx5_0, mlx5_1").
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (!item.empty()) {
      Entry e;
      size_t colon = item.find(':');
      e.name = item.substr(0, colon);
      if (colon != std::string::npos) e.port = std::atoi(item.c_str() + colon + 1);
      if (!e.name.empty()) s.entries.push_back(e);
    }
    i = comma + 1;
  }
  return s;
}

bool HcaSpec::matches(const std::string& device, int port) const {
  if (entries.empty()) return true;
  bool hit = false;
  for (const Entry& e : entries) {
    bool name_ok = exact ? device == e.name : device.compare(0, e.name.size(), e.name) == 0;
    if (name_ok && (e.port < 0 || e.port == port)) {
      hit = true;
      break;
    }
  }
  return exclude ? !hit : hit;
}

}  // namespace uccl
