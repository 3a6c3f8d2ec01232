#include "transports/verbs/verbs_wire.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

#include "transports/verbs/verbs_lanes.h"

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

std::string gid_hex(const uint8_t* gid) {
  std::string g;
  char hex[3];
  for (int i = 0; i < 16; ++i) {
    std::snprintf(hex, sizeof hex, "%02x", gid[i]);
    g += hex;
  }
  return g;
}

bool parse_gid(const std::string& g, uint8_t* gid) {
  uint64_t v;
  if (g.size() != 32) return false;
  for (int i = 0; i < 16; ++i) {
    if (!parse_u64(g.substr(2 * i, 2), &v, 16)) return false;
    gid[i] = static_cast<uint8_t>(v);
  }
  return true;
}

bool parse_rate(const std::string& s, double* out) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || !end || *end || !(v >= 0) || v > 1e6) return false;
  *out = v;
  return true;
}

std::vector<std::string> split_bars(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= s.size()) {
    size_t e = s.find('|', i);
    if (e == std::string::npos) e = s.size();
    out.push_back(s.substr(i, e - i));
    i = e + 1;
  }
  return out;
}

}  // namespace

std::string VerbsConnInfo::serialize() const {
  const std::string g = gid_hex(gid);
  std::ostringstream o;
  o.precision(17);  // rates round-trip exactly: both sides must cut messages alike
  o << "uccl-verbs v=" << version << " dev=" << device << " ll=" << link_layer << " lid=" << lid << " gid=" << g
    << " gidx=" << gid_index << " mtu=" << mtu << " qpn=" << join(qpn) << " psn=" << join(psn) << " mbox=" << std::hex
    << mbox_addr << ":" << mbox_rkey << std::dec << " ctrl=" << ctrl_slots << "x" << ctrl_slot_bytes;
  if (gbps > 0) o << " gbps=" << gbps;
  if (!fabric.empty()) o << " fab=" << fabric;
  if (adaptive_writer) o << " astripe=1";
  for (const Lane& l : lanes) {
    const VerbsConnInfo& c = *l.info;
    o << " lane" << l.index << "=" << c.device << "|" << c.link_layer << "|" << c.lid << "|" << gid_hex(c.gid) << "|"
      << c.gid_index << "|" << c.mtu << "|" << c.gbps << "|" << c.fabric << "|" << join(c.qpn) << "|" << join(c.psn);
  }
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
  if (!parse_gid(kv["gid"], c.gid)) return bad("gid");
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
  if (kv.count("gbps") && !parse_rate(kv["gbps"], &c.gbps)) return bad("gbps");
  if (kv.count("fab")) c.fabric = kv["fab"];
  if (kv.count("astripe")) {
    if (kv["astripe"] != "0" && kv["astripe"] != "1") return bad("astripe");
    c.adaptive_writer = kv["astripe"] == "1";
  }
  for (auto& e : kv) {
    if (e.first.compare(0, 4, "lane") != 0) continue;
    uint64_t index;
    if (!parse_u64(e.first.substr(4), &index) || index < 1 || index >= kMaxLanes) return bad("lane index " + e.first);
    const std::vector<std::string> f = split_bars(e.second);
    auto lane = std::make_shared<VerbsConnInfo>();
    VerbsConnInfo& l = *lane;
    if (f.size() != 10) return bad("lane " + e.first);
    l.device = f[0];
    l.link_layer = f[1];
    if (l.link_layer != "ib" && l.link_layer != "roce") return bad("lane link layer");
    if (!parse_u64(f[2], &v) || v > 0xffff) return bad("lane lid");
    l.lid = static_cast<uint32_t>(v);
    if (!parse_gid(f[3], l.gid)) return bad("lane gid");
    l.gid_index = std::atoi(f[4].c_str());
    if (!parse_u64(f[5], &v) || v < 1 || v > 5) return bad("lane mtu");
    l.mtu = static_cast<int>(v);
    if (!parse_rate(f[6], &l.gbps)) return bad("lane gbps");
    l.fabric = f[7];
    if (!parse_list(f[8], &l.qpn) || !parse_list(f[9], &l.psn) || l.qpn.size() != l.psn.size())
      return bad("lane qpn/psn");
    c.lanes.push_back({static_cast<uint32_t>(index), lane});
  }
  std::sort(c.lanes.begin(), c.lanes.end(), [](const Lane& a, const Lane& b) { return a.index < b.index; });
  return c;
}

}  // namespace uccl
