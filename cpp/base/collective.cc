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

}  // namespace uccl
