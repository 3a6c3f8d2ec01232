#include "uccl/types.h"

namespace uccl {

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kAllGather: return "all_gather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kReduce: return "reduce";
    case Collective::kAllToAll: return "all_to_all";
    case Collective::kGather: return "gather";
    case Collective::kScatter: return "scatter";
    case Collective::kSendRecv: return "send_recv";
    case Collective::kBarrier: return "barrier";
    case Collective::kAllGatherV: return "all_gather_v";
    case Collective::kReduceScatterV: return "reduce_scatter_v";
    case Collective::kAllToAllV: return "all_to_all_v";
  }
  return "unknown_collective";
}

const char* algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::kAuto: return "auto";
    case Algorithm::kLocal: return "local";
    case Algorithm::kDirect: return "direct";
    case Algorithm::kRing: return "ring";
    case Algorithm::kHalvingDoubling: return "rhd";
    case Algorithm::kHier: return "hier";
    case Algorithm::kTwoShot: return "twoshot";
    case Algorithm::kDissemination: return "dissemination";
  }
  return "unknown";
}

Result<Collective> parse_collective(const std::string& name) {
  for (int c = 0; c <= static_cast<int>(Collective::kAllToAllV); ++c)
    if (c != static_cast<int>(Collective::kSendRecv) && name == collective_name(static_cast<Collective>(c)))
      return static_cast<Collective>(c);
  return InvalidArgument("unknown collective '" + name +
                         "': expected all_reduce, all_gather, reduce_scatter, broadcast, reduce, all_to_all, gather, "
                         "scatter, barrier, or all_gather_v, reduce_scatter_v, all_to_all_v");
}

}  // namespace uccl
