// Network interfaces: listing them, matching UCCL_SOCKET_IFNAME specs, a rank's rail NIC, the
// launcher's local rank (see net.h).
#include "base/net.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <initializer_list>

#include "base/config.h"
#include "base/log.h"

namespace uccl {

const TextSetting kSocketIfname("network", "UCCL_SOCKET_IFNAME", "",
                                "interfaces to use (NCCL syntax: prefixes, ^exclude, =exact); one entry per "
                                "local rank separated by ';' binds each rank to its rail's NIC",
                                any_text());
const TextSetting kSocketFamily("network", "UCCL_SOCKET_FAMILY", "", "restrict sockets to AF_INET or AF_INET6",
                                one_of({"", "AF_INET", "AF_INET6"}));

std::string rail_ifname_spec(const std::string& spec, int local_rank, std::string* why, const char* var) {
  if (why) why->clear();
  if (spec.find(';') == std::string::npos) return spec;
  std::vector<std::string> entries;
  size_t start = 0;
  while (true) {
    size_t end = spec.find(';', start);
    std::string e = spec.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!e.empty()) entries.push_back(e);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  if (entries.empty()) return "";
  if (local_rank < 0) {
    std::string all;
    for (auto& e : entries) all += (all.empty() ? "" : ",") + e;
    if (why) *why = "local rank unknown: every rail's entry";
    return all;
  }
  const size_t i = static_cast<size_t>(local_rank) % entries.size();
  if (why)
    *why = std::string(var) + " entry " + std::to_string(i) + " of " + std::to_string(entries.size()) +
           " for local rank " + std::to_string(local_rank);
  return entries[i];
}

namespace {
// The first of `names` that holds a number (leading digits: Slurm writes "2(x3)"), else -1.
int first_env_number(std::initializer_list<const char*> names, bool whole) {
  for (const char* name : names) {
    const char* v = getenv(name);
    if (!v || !*v) continue;
    char* end = nullptr;
    long r = strtol(v, &end, 10);
    if ((!whole || *end == '\0') && end != v && r >= 0 && r < 1 << 20) return static_cast<int>(r);
  }
  return -1;
}
}  // namespace

int launcher_local_rank() {
  return first_env_number({"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}, true);
}

int launcher_local_size() {
  return first_env_number({"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"},
                          false);
}

// ---- interfaces ------------------------------------------------------------------------------

namespace {

double read_speed_gbps(const std::string& ifname) {
  std::ifstream f("/sys/class/net/" + ifname + "/speed");  // Mbit/s; EINVAL or -1 when unknown
  long mbps = -1;
  if (f && (f >> mbps) && mbps > 0) return static_cast<double>(mbps) / 1000.0;
  return 0;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

}  // namespace

namespace {

// "10.210.1.0/24": the address with the host bits cleared, and the prefix length.
std::string subnet_of(const sockaddr* addr, const sockaddr* mask) {
  if (!addr || !mask) return "";
  const bool v4 = addr->sa_family == AF_INET;
  const size_t n = v4 ? 4 : 16;
  const uint8_t* a = v4 ? reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(addr)->sin_addr)
                        : reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr);
  const uint8_t* m = v4 ? reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in*>(mask)->sin_addr)
                        : reinterpret_cast<const uint8_t*>(&reinterpret_cast<const sockaddr_in6*>(mask)->sin6_addr);
  uint8_t net[16];
  int bits = 0;
  for (size_t i = 0; i < n; ++i) {
    net[i] = a[i] & m[i];
    bits += __builtin_popcount(m[i]);
  }
  char text[INET6_ADDRSTRLEN] = {0};
  if (!inet_ntop(addr->sa_family, net, text, sizeof text)) return "";
  return std::string(text) + "/" + std::to_string(bits);
}

}  // namespace

std::vector<NetInterface> list_interfaces() {
  std::vector<NetInterface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    UCCL_WARN("getifaddrs failed: %s", std::strerror(errno));
    return out;
  }
  for (ifaddrs* ifa = list; ifa; ifa = ifa->ifa_next) {
    if (!ifa->ifa_addr || !ifa->ifa_name) continue;
    int fam = ifa->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    NetInterface ni;
    ni.name = ifa->ifa_name;
    if (fam == AF_INET) {
      std::memcpy(&ni.addr.ss, ifa->ifa_addr, sizeof(sockaddr_in));
      ni.addr.len = sizeof(sockaddr_in);
    } else {
      const auto* a6 = reinterpret_cast<const sockaddr_in6*>(ifa->ifa_addr);
      // Link-local addresses need a scope id everywhere they are used; peers on other hosts
      // cannot use ours without knowing their own interface, so they are useless for rendezvous.
      if (IN6_IS_ADDR_LINKLOCAL(&a6->sin6_addr)) continue;
      std::memcpy(&ni.addr.ss, a6, sizeof(sockaddr_in6));
      ni.addr.len = sizeof(sockaddr_in6);
    }
    ni.addr.set_port(0);
    ni.loopback = (ifa->ifa_flags & IFF_LOOPBACK) != 0;
    ni.up = (ifa->ifa_flags & IFF_UP) != 0;
    ni.running = (ifa->ifa_flags & IFF_RUNNING) != 0;
    ni.speed_gbps = ni.loopback ? 0 : read_speed_gbps(ni.name);
    ni.network = subnet_of(ifa->ifa_addr, ifa->ifa_netmask);
    out.push_back(std::move(ni));
  }
  freeifaddrs(list);
  return out;
}

bool ifname_matches(const std::string& spec_in, const std::string& ifname) {
  std::string spec = trim(spec_in);
  if (spec.empty()) return true;  // no restriction
  bool exclude = false, exact = false;
  if (spec[0] == '^') {
    exclude = true;
    spec = spec.substr(1);
  }
  if (!spec.empty() && spec[0] == '=') {
    exact = true;
    spec = spec.substr(1);
  }
  bool any = false;
  size_t pos = 0;
  while (pos <= spec.size() && !any) {
    size_t comma = spec.find(',', pos);
    if (comma == std::string::npos) comma = spec.size();
    std::string item = trim(spec.substr(pos, comma - pos));
    pos = comma + 1;
    // An item may carry its own '=' (rail lists joined by rail_ifname_spec: "=eth0,=eth1").
    const bool item_exact = exact || (!item.empty() && item[0] == '=');
    if (!item.empty() && item[0] == '=') item = item.substr(1);
    if (item.empty()) continue;
    any = item_exact ? ifname == item : ifname.compare(0, item.size(), item) == 0;
  }
  return exclude ? !any : any;
}

std::vector<NetInterface> select_interfaces(const std::string& spec, const std::string& family) {
  int want = family == "AF_INET" ? AF_INET : family == "AF_INET6" ? AF_INET6 : AF_UNSPEC;
  std::vector<NetInterface> all = list_interfaces(), out, loop;
  for (auto& ni : all) {
    if (!ni.up || (want != AF_UNSPEC && ni.addr.family() != want)) continue;
    if (!trim(spec).empty()) {
      if (ifname_matches(spec, ni.name)) out.push_back(ni);
    } else if (ni.loopback) {
      loop.push_back(ni);
    } else if (ni.name.compare(0, 6, "docker") != 0) {
      out.push_back(ni);
    }
  }
  if (out.empty() && trim(spec).empty()) out = loop;  // a laptop / single container
  // IPv4 first: it is what peers most often share; getifaddrs order is otherwise kept.
  std::stable_sort(out.begin(), out.end(), [](const NetInterface& a, const NetInterface& b) {
    return a.addr.family() == AF_INET && b.addr.family() != AF_INET;
  });
  return out;
}

}  // namespace uccl
