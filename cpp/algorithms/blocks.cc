#include "algorithms/collectives.h"
#include "base/log.h"

namespace uccl {

const TextSetting kAlgo("algorithms", "UCCL_ALGO", "auto",
                        "force an algorithm: auto, ring, direct, hier, rhd (recursive halving/doubling all_reduce), "
                        "twoshot (all_reduce / reduce_scatter: every rank reduces its block from all peers at once)",
                        any_text(),  // checked by Communicator::create with the option (parse_algorithm)
                        Scope::kJob);  // ranks compare the communicator's algorithm (option or this)
const BytesSetting kSmallMsgBytes("algorithms", "UCCL_SMALL_MSG_BYTES", "64K",
                                  "latency-oriented (direct) algorithms up to this many bytes", bytes_at_least(0),
                                  Scope::kJob);

Result<Algorithm> resolve_algorithm(const std::string& option) {
  return parse_algorithm(!option.empty() && option != "auto" ? option : kAlgo.get());
}

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

Algorithm choose_algorithm(const OpEnv& env, Schedule* s, Collective coll, size_t bytes) {
  SelectRequest req;
  req.coll = coll;
  req.dtype = static_cast<DataType>(env.envelope.dtype);
  req.bytes = bytes;
  req.size = env.size;
  req.root = env.envelope.root;
  req.topo = env.topo.get();
  req.forced = env.algo;
  req.small_msg_bytes = env.small_msg_bytes;
  bool fresh = true;
  const Algorithm algo = env.choices ? env.choices->memo.choose(req, &fresh) : choose_fast(req);
  set_algo(env, algorithm_name(algo));
  s->set_algorithm(algo);
  // INFO: the first time this communicator picks an algorithm for a collective, and again for
  // each other algorithm it picks (not on every call); the text is only built then.
  if (fresh && env.choices && log_enabled(LogLevel::kInfo)) {
    const size_t key = static_cast<size_t>(base_collective(coll)) * 16 + static_cast<size_t>(algo);
    if (key < env.choices->logged.size() && !env.choices->logged.test(key)) {
      env.choices->logged.set(key);
      UCCL_INFO("%s", select_algorithm(req).reason.c_str());
    }
  }
  return algo;
}

}  // namespace uccl
