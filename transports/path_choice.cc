#include "transports/path_choice.h"

#include <algorithm>

namespace uccl {
namespace {

bool is_rdma(const NicInfo& n) { return n.kind == "ib" || n.kind == "roce"; }

}  // namespace

std::string PathChoice::describe() const {
  std::string s = transport_name(kind);
  if (kind == TransportKind::kShm) return s + " (same host)";
  if (!my_nic.empty()) s += " via " + my_nic;
  if (kind == TransportKind::kTcp && !peer_addresses.empty()) s += " -> " + peer_addresses[0];
  else if (!peer_nic.empty()) s += " -> " + peer_nic;
  return s + " (" + why + ")";
}

PathChoice choose_path(const PeerInfo& me, const PeerInfo& peer, bool verbs_usable) {
  PathChoice pc;
  // Rank the peer's listening addresses. Its NIC entries of kind tcp carry the listen
  // address; one on a fabric we share comes first, then by rate.
  struct Cand {
    std::string addr, my_nic, peer_nic, fabric;
    int tier;
    double gbps;
  };
  std::vector<Cand> cands;
  for (const std::string& addr : peer.listen) {
    Cand c{addr, "", "", "", 1, 0};
    for (auto& pn : peer.nics) {
      if (pn.kind != "tcp" || pn.address != addr) continue;
      c.peer_nic = pn.name;
      c.gbps = pn.gbps;
      for (auto& mn : me.nics)
        if (mn.kind == "tcp" && !mn.fabric.empty() && mn.fabric == pn.fabric) {
          c.tier = 0;
          c.my_nic = mn.name;
          c.fabric = pn.fabric;
          c.gbps = mn.gbps > 0 && pn.gbps > 0 ? std::min(mn.gbps, pn.gbps) : std::max(mn.gbps, pn.gbps);
        }
    }
    cands.push_back(c);
  }
  std::stable_sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& b) {
    return a.tier != b.tier ? a.tier < b.tier : a.gbps > b.gbps;
  });
  for (auto& c : cands) pc.peer_addresses.push_back(c.addr);  // handshakes always use tcp
  if (me.host_id == peer.host_id) {
    pc.kind = TransportKind::kShm;
    pc.why = "same host";
    return pc;
  }
  // RDMA: the fastest pair of NICs of the same kind on the same (known) fabric.
  double best = -1;
  const NicInfo *mine = nullptr, *theirs = nullptr;
  for (auto& a : me.nics)
    for (auto& b : peer.nics)
      if (is_rdma(a) && is_rdma(b) && a.kind == b.kind && !a.fabric.empty() && a.fabric == b.fabric &&
          std::min(a.gbps, b.gbps) > best) {
        best = std::min(a.gbps, b.gbps);
        mine = &a;
        theirs = &b;
      }
  if (mine && verbs_usable) {
    pc.kind = TransportKind::kVerbs;
    pc.my_nic = mine->name;
    pc.peer_nic = theirs->name;
    pc.fabric = mine->fabric;
    pc.why = mine->kind + " fabric " + mine->fabric;
    return pc;
  }
  pc.kind = TransportKind::kTcp;
  if (!cands.empty()) {
    pc.my_nic = cands[0].my_nic;
    pc.peer_nic = cands[0].peer_nic;
    pc.fabric = cands[0].fabric;
  }
  if (mine) pc.why = "common " + mine->kind + " fabric " + mine->fabric + " but verbs is not available";
  else if (!pc.fabric.empty()) pc.why = "same network " + pc.fabric;
  else pc.why = "routed, no common fabric";
  return pc;
}

}  // namespace uccl
