#include "topology/peer_info.h"

#include <algorithm>

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>

#include "base/config.h"

namespace uccl {

namespace {
const TextSetting kHostId("topology", "UCCL_HOST_ID", "",
                          "host identity for shared-memory decisions (default: hostname+boot id+netns)", any_text());
}  // namespace
namespace {

// Fields are tab separated, one record per line; values never contain tabs or newlines
// (they are host names, addresses and labels), which keeps the format readable in the store.
std::string clean(std::string s) {
  for (char& c : s)
    if (c == '\t' || c == '\n') c = ' ';
  return s;
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : line) {
    if (c == '\t') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

std::string read_first_line(const char* path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

}  // namespace

std::string PeerInfo::serialize() const {
  std::ostringstream o;
  o << "peer\t" << rank << '\t' << clean(host_id) << '\t' << clean(hostname) << '\t' << pid << '\t' << clean(cluster)
    << '\n';
  for (auto& l : listen) o << "listen\t" << clean(l) << '\n';
  for (auto& n : nics)
    o << "nic\t" << clean(n.name) << '\t' << clean(n.kind) << '\t' << clean(n.fabric) << '\t' << clean(n.address)
      << '\t' << n.gbps << '\t' << clean(n.network) << '\n';
  if (rates.host_gbps > 0 || rates.nic_gbps > 0 || rates.uplink_gbps > 0)
    o << "rates\t" << rates.host_gbps << '\t' << rates.nic_gbps << '\t' << rates.uplink_gbps << '\n';
  if (!agree.empty()) o << "agree\t" << clean(agree) << '\n';
  if (!machine.empty()) o << "machine\t" << clean(machine) << '\n';
  for (auto& s : settings) o << "setting\t" << clean(s.first) << '\t' << clean(s.second) << '\n';
  return o.str();
}

Result<PeerInfo> PeerInfo::parse(const std::string& text) {
  PeerInfo p;
  std::istringstream in(text);
  std::string line;
  bool have_header = false;
  while (std::getline(in, line)) {
    auto f = split_tabs(line);
    if (f[0] == "peer" && f.size() >= 6) {
      p.rank = std::atoi(f[1].c_str());
      p.host_id = f[2];
      p.hostname = f[3];
      p.pid = std::atoi(f[4].c_str());
      p.cluster = f[5];
      have_header = true;
    } else if (f[0] == "listen" && f.size() >= 2) {
      p.listen.push_back(f[1]);
    } else if (f[0] == "nic" && f.size() >= 6) {
      p.nics.push_back({f[1], f[2], f[3], f[4], std::atof(f[5].c_str()), f.size() >= 7 ? f[6] : ""});
    } else if (f[0] == "rates" && f.size() >= 4) {
      p.rates = {std::atof(f[1].c_str()), std::atof(f[2].c_str()), std::atof(f[3].c_str())};
    } else if (f[0] == "agree" && f.size() >= 2 && !f[1].empty()) {
      p.agree = f[1];
    } else if (f[0] == "machine" && f.size() >= 2) {
      p.machine = f[1];
    } else if (f[0] == "setting" && f.size() >= 3) {
      p.settings.emplace_back(f[1], f[2]);
    } else if (!line.empty()) {
      return InvalidArgument("malformed PeerInfo line: " + line);
    }
  }
  if (!have_header) return InvalidArgument("PeerInfo without a header line");
  return p;
}

std::string host_identity() {
  if (!kHostId.get().empty()) return kHostId.get();
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  std::string boot = read_first_line("/proc/sys/kernel/random/boot_id");
  struct stat st {};
  std::string netns = stat("/proc/self/ns/net", &st) == 0 ? std::to_string(st.st_ino) : "?";
  return std::string(host) + "/" + boot + "/netns:" + netns;
}

std::string machine_identity() { return read_first_line("/proc/sys/kernel/random/boot_id"); }

std::string settings_difference(const PeerInfo& me, const PeerInfo& peer) {
  if (peer.settings.empty()) return "";  // a peer that does not say
  std::map<std::string, std::string> theirs(peer.settings.begin(), peer.settings.end());
  for (auto& [name, mine] : me.settings) {
    auto it = theirs.find(name);
    const std::string other = it == theirs.end() ? std::string("(not known)") : it->second;
    if (other != mine)
      return name + " is '" + mine + "' on rank " + std::to_string(me.rank) + " but '" + other + "' on rank " +
             std::to_string(peer.rank);
  }
  std::map<std::string, std::string> mine(me.settings.begin(), me.settings.end());
  for (auto& s : peer.settings)
    if (!mine.count(s.first))
      return s.first + " is not known on rank " + std::to_string(me.rank) + " but '" + s.second + "' on rank " +
             std::to_string(peer.rank);
  return "";
}

std::vector<AddressChoice> rank_peer_addresses(const PeerInfo& me, const PeerInfo& peer) {
  struct Cand {
    AddressChoice c;
    int tier;
    double gbps;
  };
  std::vector<Cand> cands;
  for (const std::string& addr : peer.listen) {
    Cand c{{addr, "", "", ""}, 1, 0};
    for (auto& pn : peer.nics) {
      if (pn.kind != "tcp" || pn.address != addr) continue;
      c.c.peer_nic = pn.name;
      c.gbps = pn.gbps;
      for (auto& mn : me.nics)
        if (mn.kind == "tcp" && !mn.fabric.empty() && mn.fabric == pn.fabric) {
          c.tier = 0;
          c.c.my_nic = mn.name;
          c.c.fabric = pn.fabric;
          c.gbps = mn.gbps > 0 && pn.gbps > 0 ? std::min(mn.gbps, pn.gbps) : std::max(mn.gbps, pn.gbps);
        }
    }
    cands.push_back(c);
  }
  std::stable_sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& b) {
    return a.tier != b.tier ? a.tier < b.tier : a.gbps > b.gbps;
  });
  std::vector<AddressChoice> out;
  for (auto& c : cands) out.push_back(c.c);
  return out;
}

std::vector<StripeLane> stripe_lanes(const PeerInfo& me, const PeerInfo& peer) {
  std::vector<StripeLane> lanes;
  for (const std::string& addr : peer.listen) {
    for (auto& pn : peer.nics) {
      if (pn.kind != "tcp" || pn.address != addr || pn.network.empty()) continue;
      for (auto& mn : me.nics) {
        if (mn.kind != "tcp" || mn.network != pn.network) continue;
        bool seen = false;
        for (auto& l : lanes) seen |= l.network == pn.network;
        if (seen) break;
        const double g = mn.gbps > 0 && pn.gbps > 0 ? std::min(mn.gbps, pn.gbps) : std::max(mn.gbps, pn.gbps);
        lanes.push_back({pn.network, mn.name, addr, g});
        break;
      }
    }
  }
  double fastest = 0;
  for (auto& l : lanes) fastest = std::max(fastest, l.gbps);
  lanes.erase(std::remove_if(lanes.begin(), lanes.end(),
                             [&](const StripeLane& l) { return l.gbps > 0 && l.gbps < 0.5 * fastest; }),
              lanes.end());
  std::sort(lanes.begin(), lanes.end(), [](const StripeLane& a, const StripeLane& b) { return a.network < b.network; });
  if (lanes.size() < 2) lanes.clear();
  return lanes;
}

}  // namespace uccl
