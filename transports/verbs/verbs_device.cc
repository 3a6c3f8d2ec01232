#include "transports/verbs/verbs_device.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>

#include "base/log.h"
#include "transports/verbs/verbs_hca_spec.h"
#include "transports/verbs/verbs_mr_cache.h"

namespace uccl {
namespace {

std::string read_sysfs(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  if (!f || !std::getline(f, line)) return "";
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  return line;
}

std::string port_dir(const std::string& dev, int port) {
  return "/sys/class/infiniband/" + dev + "/ports/" + std::to_string(port);
}

bool gid_is_zero(const ibv_gid& g) {
  for (uint8_t b : g.raw)
    if (b) return false;
  return true;
}

bool gid_is_ipv4_mapped(const ibv_gid& g) {
  for (int i = 0; i < 10; ++i)
    if (g.raw[i]) return false;
  return g.raw[10] == 0xff && g.raw[11] == 0xff;
}

// RoCE: the GID index to use. Prefers RoCE v2 + IPv4-mapped, then RoCE v2, then any valid GID.
int pick_roce_gid(const IbvApi* api, ibv_context* ctx, const std::string& dev, int port, int table_len) {
  int best = -1, best_rank = 0;
  for (int i = 0; i < table_len; ++i) {
    ibv_gid g{};
    if (api->query_gid(ctx, static_cast<uint8_t>(port), i, &g) != 0 || gid_is_zero(g)) continue;
    std::string type = read_sysfs(port_dir(dev, port) + "/gid_attrs/types/" + std::to_string(i));
    bool v2 = type.find("v2") != std::string::npos;
    int rank = (v2 ? 2 : 0) + (gid_is_ipv4_mapped(g) ? 1 : 0) + 1;
    if (rank > best_rank) best = i, best_rank = rank;
    if (rank == 4) break;
  }
  return best;
}

double rate_gbps(uint8_t speed, uint8_t width) {
  double lane = 0;
  switch (speed) {
    case 1: lane = 2.5; break;     // SDR
    case 2: lane = 5.0; break;     // DDR
    case 4: lane = 10.0; break;    // QDR
    case 8: lane = 10.3125; break; // FDR10
    case 16: lane = 14.0625; break;// FDR
    case 32: lane = 25.78125; break;  // EDR
    case 64: lane = 53.125; break; // HDR
    case 128: lane = 106.25; break;// NDR
    default: lane = 0;
  }
  int lanes = width == 1 ? 1 : width == 2 ? 4 : width == 4 ? 8 : width == 8 ? 12 : width == 16 ? 2 : 0;
  return lane * lanes;
}

// "roce:10.77.0.0/24": the IPv4 subnet of `netdev` that contains the GID's address.
std::string roce_fabric(const ibv_gid& g, const std::string& netdev) {
  char text[INET6_ADDRSTRLEN];
  if (!gid_is_ipv4_mapped(g)) {
    inet_ntop(AF_INET6, g.raw, text, sizeof text);
    ibv_gid prefix = g;
    std::memset(prefix.raw + 8, 0, 8);
    inet_ntop(AF_INET6, prefix.raw, text, sizeof text);
    return std::string("roce:") + text + "/64";
  }
  uint32_t ip;
  std::memcpy(&ip, g.raw + 12, 4);
  uint32_t mask = 0xffffffffu;  // /32 unless the interface says otherwise
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* a = list; a; a = a->ifa_next) {
      if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET || !a->ifa_netmask) continue;
      if (!netdev.empty() && netdev != a->ifa_name) continue;
      if (reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr != ip) continue;
      mask = ntohl(reinterpret_cast<sockaddr_in*>(a->ifa_netmask)->sin_addr.s_addr);
      break;
    }
    freeifaddrs(list);
  }
  int bits = __builtin_popcount(mask);
  in_addr net{htonl(ntohl(ip) & mask)};
  inet_ntop(AF_INET, &net, text, sizeof text);
  return std::string("roce:") + text + "/" + std::to_string(bits);
}

std::string ib_fabric(const ibv_gid& g0) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "ib:%02x%02x:%02x%02x:%02x%02x:%02x%02x", g0.raw[0], g0.raw[1], g0.raw[2],
                g0.raw[3], g0.raw[4], g0.raw[5], g0.raw[6], g0.raw[7]);
  return buf;
}

// Fills `out` for one port of an open context.
bool describe_port(const IbvApi* api, ibv_context* ctx, const std::string& dev, int port, int gid_index,
                   PortInfo* out, std::string* why) {
  ibv_port_attr pa{};
  if (verbs_query_port(api, ctx, static_cast<uint8_t>(port), &pa) != 0) {
    *why = dev + ":" + std::to_string(port) + ": ibv_query_port failed";
    return false;
  }
  PortInfo p;
  VerbsNic& n = p.nic;
  n.device = dev;
  n.port = port;
  n.name = dev + ":" + std::to_string(port);
  n.active = pa.state == IBV_PORT_ACTIVE;
  n.mtu = mtu_bytes(pa.active_mtu);
  n.gbps = rate_gbps(pa.active_speed, pa.active_width);
  p.active_mtu = pa.active_mtu;
  p.max_msg_sz = pa.max_msg_sz;
  p.lid = pa.lid;
  p.is_roce = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
  n.link_layer = p.is_roce ? "roce" : "ib";
  if (p.is_roce) {
    p.gid_index = gid_index >= 0 ? gid_index : pick_roce_gid(api, ctx, dev, port, pa.gid_tbl_len);
    if (p.gid_index < 0 || api->query_gid(ctx, static_cast<uint8_t>(port), p.gid_index, &p.gid) != 0 ||
        gid_is_zero(p.gid)) {
      *why = n.name + ": no usable RoCE GID" +
             (gid_index >= 0 ? " at UCCL_IB_GID_INDEX=" + std::to_string(gid_index) : std::string());
      return false;
    }
    n.gid_index = p.gid_index;
    n.netdev = read_sysfs(port_dir(dev, port) + "/gid_attrs/ndevs/" + std::to_string(p.gid_index));
    n.address = gid_to_string(p.gid);
    n.fabric = roce_fabric(p.gid, n.netdev);
  } else {
    // IB: LID routing inside the subnet; a GID is kept for the subnet prefix (and for GRH when
    // UCCL_IB_GID_INDEX asks for it, e.g. across IB routers).
    p.gid_index = gid_index;
    ibv_gid g0{};
    api->query_gid(ctx, static_cast<uint8_t>(port), gid_index >= 0 ? gid_index : 0, &g0);
    p.gid = g0;
    char lid[16];
    std::snprintf(lid, sizeof lid, "lid 0x%x", pa.lid);
    n.address = lid;
    n.gid_index = gid_index;
    n.fabric = ib_fabric(g0);
  }
  *out = p;
  return true;
}

}  // namespace

int mtu_bytes(ibv_mtu mtu) { return 128 << static_cast<int>(mtu); }

std::string gid_to_string(const ibv_gid& gid) {
  char text[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, gid.raw, text, sizeof text);
  return text;
}

Result<std::vector<PortInfo>> enumerate_ports(const std::string& hca_spec, int gid_index) {
  std::string why;
  const IbvApi* api = ibverbs(&why);
  if (!api) return NotSupported("verbs unavailable: " + why);
  int n = 0;
  ibv_device** list = api->get_device_list(&n);
  if (!list || n == 0) {
    if (list) api->free_device_list(list);
    return NotSupported("verbs unavailable: no RDMA devices (ibv_get_device_list found none)");
  }
  HcaSpec spec = HcaSpec::parse(hca_spec);
  std::vector<PortInfo> ports;
  std::string seen, errors;
  for (int i = 0; i < n; ++i) {
    std::string dev = api->get_device_name(list[i]);
    ibv_context* ctx = api->open_device(list[i]);
    if (!ctx) {
      errors += " " + dev + ": ibv_open_device failed;";
      continue;
    }
    ibv_device_attr da{};
    int nports = api->query_device(ctx, &da) == 0 ? da.phys_port_cnt : 1;
    for (int port = 1; port <= nports; ++port) {
      seen += " " + dev + ":" + std::to_string(port);
      if (!spec.matches(dev, port)) continue;
      PortInfo p;
      std::string err;
      if (describe_port(api, ctx, dev, port, gid_index, &p, &err))
        ports.push_back(p);
      else
        errors += " " + err + ";";
    }
    api->close_device(ctx);
  }
  api->free_device_list(list);
  if (ports.empty()) {
    std::string msg = hca_spec.empty() ? "no usable RDMA port among" + seen
                                       : "UCCL_IB_HCA=" + hca_spec + " matches none of:" + seen;
    return NotSupported("verbs unavailable: " + msg + (errors.empty() ? "" : " (" + errors + ")"));
  }
  return ports;
}

// ---- the process-wide device table ----------------------------------------------------------

namespace {
std::mutex g_devices_mu;
std::map<std::string, std::weak_ptr<VerbsDevice>>& devices() {
  static std::map<std::string, std::weak_ptr<VerbsDevice>> m;
  return m;
}
}  // namespace

Result<std::shared_ptr<VerbsDevice>> VerbsDevice::open(const VerbsOptions& options) {
  auto ports = enumerate_ports(options.hca, options.gid_index);
  if (!ports.ok()) return ports.status();
  const PortInfo* chosen = nullptr;
  std::string inactive;
  for (const PortInfo& p : ports.value()) {
    if (p.nic.active) {
      chosen = &p;
      break;
    }
    inactive += " " + p.nic.name;
  }
  if (!chosen) return NotSupported("verbs unavailable: no ACTIVE port (down:" + inactive + ")");
  std::string key = chosen->nic.name + "/" + std::to_string(chosen->gid_index);

  std::lock_guard<std::mutex> lock(g_devices_mu);
  if (auto existing = devices()[key].lock()) return existing;

  const IbvApi* api = ibverbs();
  int n = 0;
  ibv_device** list = api->get_device_list(&n);
  ibv_context* ctx = nullptr;
  for (int i = 0; list && i < n && !ctx; ++i)
    if (chosen->nic.device == api->get_device_name(list[i])) ctx = api->open_device(list[i]);
  if (list) api->free_device_list(list);
  if (!ctx) return Status(Code::kSystemError, "verbs " + chosen->nic.name + ": ibv_open_device failed");
  ibv_pd* pd = api->alloc_pd(ctx);
  if (!pd) {
    api->close_device(ctx);
    return Status(Code::kSystemError, "verbs " + chosen->nic.name + ": ibv_alloc_pd failed");
  }
  std::shared_ptr<VerbsDevice> d(new VerbsDevice());
  d->api_ = api;
  d->ctx_ = ctx;
  d->pd_ = pd;
  d->port_ = *chosen;
  d->cache_.reset(new MrCache(api, pd, chosen->nic.name));
  devices()[key] = d;
  UCCL_INFO("verbs: opened %s (%s, fabric %s, %.0f Gbit/s)", d->describe().c_str(), d->port_.nic.address.c_str(),
            d->port_.nic.fabric.c_str(), d->port_.nic.gbps);
  return d;
}

VerbsDevice::~VerbsDevice() {
  cache_.reset();  // deregisters everything before the PD goes
  if (pd_) api_->dealloc_pd(pd_);
  if (ctx_) api_->close_device(ctx_);
}

std::string VerbsDevice::describe() const {
  std::string s = port_.nic.name + " " + port_.nic.link_layer;
  if (port_.gid_index >= 0) s += " gid-idx " + std::to_string(port_.gid_index);
  if (!port_.is_roce) s += " " + port_.nic.address;
  return s + " mtu " + std::to_string(port_.nic.mtu);
}

std::vector<std::shared_ptr<VerbsDevice>> open_verbs_devices() {
  std::lock_guard<std::mutex> lock(g_devices_mu);
  std::vector<std::shared_ptr<VerbsDevice>> out;
  for (auto& kv : devices())
    if (auto d = kv.second.lock()) out.push_back(d);
  return out;
}

}  // namespace uccl
