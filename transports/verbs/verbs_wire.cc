#include "transports/verbs/verbs_wire.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

namespace uccl {
namespace {

std::string join(const std::vector<uint32_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

bool parse_u64(const std::string& s, uint64_t* out, int base = 10) {
  if (s.empty()) return false;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s.c_str(), &end, base);
  if (!end || *end) return false;
  *out = v;
  return true;
}

bool parse_list(const std::string& s, std::vector<uint32_t>* out) {
  out->clear();
  size_t i = 0;
  while (i <= s.size()) {
    size_t c = s.find(',', i);
    if (c == std::string::npos) c = s.size();
    uint64_t v;
    if (!parse_u64(s.substr(i, c - i), &v) || v > 0xffffffffu) return false;
    out->push_back(static_cast<uint32_t>(v));
    i = c + 1;
  }
  return !out->empty();
}

}  // namespace

std::string VerbsConnInfo::serialize() const {
  std::string g;
  char hex[3];
  for (uint8_t b : gid) {
    std::snprintf(hex, sizeof hex, "%02x", b);
    g += hex;
  }
  std::ostringstream o;
  o << "uccl-verbs v=" << version << " dev=" << device << " ll=" << link_layer << " lid=" << lid << " gid=" << g
    << " gidx=" << gid_index << " mtu=" << mtu << " qpn=" << join(qpn) << " psn=" << join(psn) << " mbox=" << std::hex
    << mbox_addr << ":" << mbox_rkey << std::dec << " ctrl=" << ctrl_slots << "x" << ctrl_slot_bytes;
  return o.str();
}

Result<VerbsConnInfo> VerbsConnInfo::parse(const std::string& text) {
  auto bad = [&](const std::string& what) {
    return Status(Code::kRemoteError, "malformed verbs connection info (" + what + "): '" + text + "'");
  };
  std::istringstream in(text);
  std::string word;
  if (!(in >> word) || word != "uccl-verbs") return bad("no uccl-verbs header");
  std::map<std::string, std::string> kv;
  while (in >> word) {
    size_t eq = word.find('=');
    if (eq == std::string::npos) return bad("token without '=': " + word);
    kv[word.substr(0, eq)] = word.substr(eq + 1);
  }
  for (const char* k : {"v", "dev", "ll", "lid", "gid", "gidx", "mtu", "qpn", "psn", "mbox", "ctrl"})
    if (!kv.count(k)) return bad(std::string("missing ") + k);
  VerbsConnInfo c;
  uint64_t v;
  if (!parse_u64(kv["v"], &v)) return bad("version");
  if (v != kVerbsWireVersion)
    return Status(Code::kRemoteError, "peer speaks verbs wire version " + kv["v"] + ", this build speaks " +
                                          std::to_string(kVerbsWireVersion));
  c.version = static_cast<uint32_t>(v);
  c.device = kv["dev"];
  c.link_layer = kv["ll"];
  if (c.link_layer != "ib" && c.link_layer != "roce") return bad("link layer");
  if (!parse_u64(kv["lid"], &v) || v > 0xffff) return bad("lid");
  c.lid = static_cast<uint32_t>(v);
  const std::string& g = kv["gid"];
  if (g.size() != 32) return bad("gid");
  for (int i = 0; i < 16; ++i) {
    if (!parse_u64(g.substr(2 * i, 2), &v, 16)) return bad("gid");
    c.gid[i] = static_cast<uint8_t>(v);
  }
  c.gid_index = std::atoi(kv["gidx"].c_str());
  if (!parse_u64(kv["mtu"], &v) || v < 1 || v > 5) return bad("mtu");
  c.mtu = static_cast<int>(v);
  if (!parse_list(kv["qpn"], &c.qpn) || !parse_list(kv["psn"], &c.psn) || c.qpn.size() != c.psn.size())
    return bad("qpn/psn");
  const std::string& mb = kv["mbox"];
  size_t colon = mb.find(':');
  if (colon == std::string::npos || !parse_u64(mb.substr(0, colon), &c.mbox_addr, 16) ||
      !parse_u64(mb.substr(colon + 1), &v, 16))
    return bad("mbox");
  c.mbox_rkey = static_cast<uint32_t>(v);
  const std::string& ct = kv["ctrl"];
  size_t x = ct.find('x');
  uint64_t slots, bytes;
  if (x == std::string::npos || !parse_u64(ct.substr(0, x), &slots) || !parse_u64(ct.substr(x + 1), &bytes) ||
      slots < 8 || bytes < sizeof(CtrlMsg))
    return bad("ctrl");
  c.ctrl_slots = static_cast<uint32_t>(slots);
  c.ctrl_slot_bytes = static_cast<uint32_t>(bytes);
  return c;
}

}  // namespace uccl
