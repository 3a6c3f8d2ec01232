#include "transports/path_choice.h"

#include "base/config.h"
#include "transports/registry.h"

namespace uccl {
namespace {

std::vector<std::string> split_names(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size()) {
    size_t e = s.find(',', b);
    if (e == std::string::npos) e = s.size();
    std::string n = s.substr(b, e - b);
    n.erase(0, n.find_first_not_of(' '));
    n.erase(n.find_last_not_of(' ') + 1);
    if (!n.empty()) out.push_back(n);
    b = e + 1;
  }
  return out;
}

std::string known_names() {
  std::string s = "auto";
  for (const TransportEntry* e : transport_table()) s += ", " + e->name;
  return s;
}

PathChoice make_choice(const TransportEntry& e, const PathVerdict& v, const std::vector<std::string>& addresses) {
  PathChoice pc;
  pc.kind = e.id;
  pc.name = e.name;
  pc.my_nic = v.my_nic;
  pc.peer_nic = v.peer_nic;
  pc.fabric = v.fabric;
  pc.target = v.target;
  pc.why = v.why;
  pc.peer_addresses = addresses;
  return pc;
}

}  // namespace

const TextSetting kStripeNetworks("network", "UCCL_STRIPE_NETWORKS", "auto",
                                  "auto: a tcp connection between ranks that share several subnets stripes its sockets "
                                  "over all of them, and a verbs connection its QPs over every HCA port the rank may "
                                  "use that the peer has a port beside, weighted by their rates (one rank over "
                                  "several NICs); off: the best network / one port only",
                                  one_of({"auto", "off"}));

Status check_transport_names(const std::string& forced) {
  if (forced.empty() || forced == "auto") return Status::Ok();
  for (const std::string& n : split_names(forced))
    if (!find_transport(n))
      return InvalidArgument("unknown transport '" + n + "' (UCCL_TRANSPORT or the transport option; expected " +
                             known_names() + ")");
  return split_names(forced).empty() ? InvalidArgument("empty transport list '" + forced + "'") : Status::Ok();
}

std::string PathChoice::describe() const {
  std::string s = name;
  if (!my_nic.empty()) s += " via " + my_nic;
  if (!target.empty()) s += " -> " + target;
  return s + " (" + why + ")";
}

Result<std::vector<PathChoice>> path_candidates(const PeerInfo& me, const PeerInfo& peer, const std::string& forced) {
  std::vector<std::string> addresses;
  for (const AddressChoice& a : rank_peer_addresses(me, peer)) addresses.push_back(a.address);
  const bool automatic = forced.empty() || forced == "auto";
  std::vector<const TransportEntry*> entries;
  if (automatic) {
    entries = transport_table();
  } else {
    UCCL_RETURN_IF_ERROR(check_transport_names(forced));
    for (const std::string& n : split_names(forced)) entries.push_back(find_transport(n));
  }
  std::vector<PathChoice> out;
  std::string left_out;  // why each transport cannot carry this pair
  for (const TransportEntry* e : entries) {
    std::string why;
    PathVerdict v = e->can_connect(me, peer);
    if (!v.ok) why = v.why;
    else if (!e->available(&why)) why = "not available here" + (why.empty() ? std::string() : ": " + why);
    if (why.empty()) {
      out.push_back(make_choice(*e, v, addresses));
      continue;
    }
    // A better transport the pair could use but this process cannot: say so on the path.
    if (automatic && v.ok && out.empty()) left_out += (left_out.empty() ? "" : "; ") + e->name + " " + why;
    if (!automatic) left_out += (left_out.empty() ? "" : "; ") + e->name + ": " + why;
  }
  if (out.empty())
    return NotSupported("no transport can reach rank " + std::to_string(peer.rank) + " (host " + peer.hostname + ")" +
                        (automatic ? "" : " among '" + forced + "'") + (left_out.empty() ? "" : ": " + left_out));
  if (automatic && !left_out.empty()) out[0].why += "; " + left_out;
  return out;
}

std::vector<StripeLane> pair_lanes(const PeerInfo& me, const PeerInfo& peer) {
  if (kStripeNetworks.get() == "off") return {};
  return me.rank <= peer.rank ? stripe_lanes(me, peer) : stripe_lanes(peer, me);
}

PathChoice choose_path(const PeerInfo& me, const PeerInfo& peer) {
  auto c = path_candidates(me, peer, "auto");
  if (c.ok()) return c.value()[0];
  PathChoice none;
  none.name = "none";
  none.why = c.status().message();
  return none;
}

}  // namespace uccl
