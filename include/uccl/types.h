// The vocabulary every part of uccl speaks: element types, reduction operators and collectives.
//
// Public (include/uccl): an embedder sees these in every argument struct; inside uccl the wire
// protocol (Envelope), the reduce kernels (cpp/base) and the transports use the same values, so
// this header depends on nothing but status.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "uccl/status.h"

namespace uccl {

// Values are part of the wire protocol (Envelope) and of the Python API: append only.
enum class DataType : uint8_t {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kInt64 = 3,
  kFloat16 = 4,
  kBFloat16 = 5,
  kFloat32 = 6,
  kFloat64 = 7,
};
constexpr int kNumDataTypes = 8;

// Floats: min/max propagate NaN (like numpy's maximum/minimum), and every NaN a reduction
// writes is the canonical quiet NaN (positive, all payload bits set), whichever device (host,
// GPU) computed it: results are bit-identical across devices, NaN included.
enum class RedOp : uint8_t {
  kSum = 0,
  kProd = 1,
  kMin = 2,
  kMax = 3,
  kAvg = 4,        // sum, then divide by the number of ranks
  kPremulSum = 5,  // each rank's input is multiplied by a scalar before the sum (FSDP uses it)
  kBand = 6,       // bitwise and / or / xor: integer dtypes only (torch's BAND, BOR, BXOR)
  kBor = 7,
  kBxor = 8,
};
constexpr int kNumRedOps = 9;

// Bitwise reductions are defined for integer element types only.
inline bool redop_is_bitwise(RedOp op) { return op == RedOp::kBand || op == RedOp::kBor || op == RedOp::kBxor; }
bool dtype_is_integer(DataType t);

size_t dtype_size(DataType t);
const char* dtype_name(DataType t);
const char* redop_name(RedOp op);
bool dtype_valid(int t);
bool redop_valid(int op);

// Values travel in the Envelope: append only.
enum class Collective : uint8_t {
  kAllReduce = 0,
  kAllGather = 1,
  kReduceScatter = 2,
  kBroadcast = 3,
  kReduce = 4,
  kAllToAll = 5,
  kGather = 6,
  kScatter = 7,
  kSendRecv = 8,  // a batch of point-to-point sends and receives
  kBarrier = 9,
  kAllGatherV = 10,
  kReduceScatterV = 11,
  kAllToAllV = 12,
};
const char* collective_name(Collective c);

// The algorithms a collective can run (chosen in one place: cpp/algorithms/select.h). Values
// travel in the Envelope, which carries the sender's algorithm so that ranks that chose
// differently (settings that differ between ranks) fail with a mismatch instead of combining
// unrelated blocks: append only.
enum class Algorithm : uint8_t {
  kAuto = 0,             // not an algorithm: "let the table choose" (and p2p messages)
  kLocal = 1,            // one rank: a copy
  kDirect = 2,           // every message in one phase (latency)
  kRing = 3,             // rings (bandwidth)
  kHalvingDoubling = 4,  // "rhd": recursive halving/doubling all_reduce
  kHier = 5,             // rings along the topology's levels (hierarchical.cc)
  kTwoShot = 6,          // "twoshot": each rank reduces its block from all peers at once, then sends it to all
  kDissemination = 7,    // barrier
};
// "auto", "local", "direct", "ring", "rhd", "hier", "twoshot", "dissemination"; "unknown" else.
const char* algorithm_name(Algorithm a);
// The collective that collective_name() calls `name` ("all_reduce", "all_gather_v", ...; not
// "send_recv", which is a batch of messages rather than a collective): kInvalidArgument naming
// the accepted words otherwise. The C API and Python name collectives this way.
Result<Collective> parse_collective(const std::string& name);

}  // namespace uccl
