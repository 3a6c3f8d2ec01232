// Device and port selection for the verbs transport.
//
// A port is addressed by LID on InfiniBand and by GID on Ethernet (RoCE). For RoCE the GID
// index matters: index 0 is usually the link-local RoCE v1 GID, which does not route; we pick
// the RoCE v2 GID whose address is IPv4-mapped (what every RoCE v2 fabric routes on), reading
// the type from /sys/class/infiniband/<dev>/ports/<p>/gid_attrs/types/<i> because
// ibv_query_gid_type is too new to rely on. UCCL_IB_GID_INDEX overrides the choice.
//
// VerbsDevice is shared process wide per (device, port, GID index): every transport and endpoint
// on it uses one ibv_context and one protection domain, so one registration cache serves all
// communicators of the process (a buffer registered by one is reused by the next).
#pragma once

#include <infiniband/verbs.h>

#include <memory>
#include <string>
#include <vector>

#include "uccl/status.h"
#include "transports/verbs/ibverbs_loader.h"
#include "transports/verbs/verbs_transport.h"

namespace uccl {

class MrCache;

// Everything the transport needs to know about one port (plus the VerbsNic summary).
struct PortInfo {
  VerbsNic nic;
  bool is_roce = false;
  uint16_t lid = 0;
  ibv_mtu active_mtu = IBV_MTU_1024;
  ibv_gid gid{};
  int gid_index = -1;  // -1 on IB without GRH
  uint32_t max_msg_sz = 0;
};

// Every port of every device selected by `hca_spec`, in device order, with GID chosen as above
// (`gid_index` >= 0 forces that index). Not found / no library: an error saying why.
Result<std::vector<PortInfo>> enumerate_ports(const std::string& hca_spec, int gid_index);

int mtu_bytes(ibv_mtu mtu);
std::string gid_to_string(const ibv_gid& gid);

class VerbsDevice {
 public:
  // The first ACTIVE port selected by options.hca (shared per process; opened on first use).
  static Result<std::shared_ptr<VerbsDevice>> open(const VerbsOptions& options);
  ~VerbsDevice();

  const IbvApi* api() const { return api_; }
  ibv_context* context() const { return ctx_; }
  ibv_pd* pd() const { return pd_; }
  const PortInfo& port() const { return port_; }
  MrCache& mr_cache() { return *cache_; }
  // "rxe0:1 roce gid-idx 1 mtu 1024" (used by describe() and error messages).
  std::string describe() const;
  // "rxe0:1", the prefix of error messages.
  const std::string& name() const { return port_.nic.name; }

 private:
  VerbsDevice() = default;
  const IbvApi* api_ = nullptr;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  PortInfo port_;
  std::unique_ptr<MrCache> cache_;
};

// Every VerbsDevice currently open in the process (for the cache statistics and invalidation).
std::vector<std::shared_ptr<VerbsDevice>> open_verbs_devices();

}  // namespace uccl
