#include <cstring>

#include "algorithms/collectives.h"
#include "base/log.h"

namespace uccl {

size_t Blocks::total() const {
  size_t t = 0;
  for (size_t c : cnt) t += c;
  return t;
}

Blocks even_blocks(size_t count, int n) {
  Blocks b;
  size_t base = count / n, extra = count % n, off = 0;
  for (int i = 0; i < n; ++i) {
    size_t c = base + (static_cast<size_t>(i) < extra ? 1 : 0);
    b.off.push_back(off);
    b.cnt.push_back(c);
    off += c;
  }
  return b;
}

Blocks blocks_from(const std::vector<size_t>& counts, const std::vector<size_t>& displs) {
  Blocks b;
  size_t off = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    b.off.push_back(displs.empty() ? off : displs[i]);
    b.cnt.push_back(counts[i]);
    off += counts[i];
  }
  return b;
}

const char* pick_algorithm(const OpEnv& env, size_t bytes) {
  if (env.algo == AlgoChoice::kRing) return "ring";
  if (env.algo == AlgoChoice::kDirect) return "direct";
  return bytes <= env.small_msg_bytes ? "direct" : "ring";
}

bool algo_choice_valid(const std::string& name) {
  return name.empty() || name == "auto" || name == "ring" || name == "direct" || name == "hier" ||
         name == "hierarchical" || name == "rhd";
}

AlgoChoice parse_algo_choice(const std::string& name) {
  if (name == "ring") return AlgoChoice::kRing;
  if (name == "direct") return AlgoChoice::kDirect;
  if (name == "hier" || name == "hierarchical") return AlgoChoice::kHier;
  if (name == "rhd") return AlgoChoice::kHalvingDoubling;
  return AlgoChoice::kAuto;
}

}  // namespace uccl
