// The arguments of each collective: one struct per operation (not long parameter lists), so that
// a new field has a default and old callers keep compiling.
//
// Public (include/uccl). Counts are in elements, displacements in elements; send == recv means
// in place where the collective allows it (the field comments say where send lies then); send
// and receive buffers that overlap any other way are refused (InvalidArgument). The schedule
// builders (cpp/algorithms) take these structs as they are.
//
// Buffers may be host memory or device memory of a registered device backend (cpp/base/
// device.h): the core finds out from the pointers (all buffers of one call must live in one
// place). `stream` is the device stream (a cudaStream_t, or a simulated stream's handle) the
// operation is ordered after: it starts only once the work queued there before the call has
// completed; 0 means the device's default stream. Ignored for host buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "uccl/types.h"

namespace uccl {

struct AllReduceArgs {
  const void* send = nullptr;
  void* recv = nullptr;  // may equal send
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  RedOp op = RedOp::kSum;
  double scalar = 1.0;  // premul_sum factor
  uintptr_t stream = 0;  // device buffers: ordered after this stream's queued work (last: aggregates)
};
struct ReduceArgs : AllReduceArgs {
  int root = 0;  // recv is only written (and may be null) off the root
};
struct BroadcastArgs {
  const void* send = nullptr;  // read on the root only
  void* recv = nullptr;        // written on every rank (root too, unless recv == send)
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  int root = 0;
  uintptr_t stream = 0;  // device buffers: ordered after this stream's queued work (last: aggregates)
};
struct AllGatherArgs {
  const void* send = nullptr;  // count elements; may equal recv + rank*count (in place)
  void* recv = nullptr;        // size * count elements
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  uintptr_t stream = 0;  // device buffers: ordered after this stream's queued work (last: aggregates)
};
struct AllGatherVArgs {
  const void* send = nullptr;  // recv_counts[rank] elements
  void* recv = nullptr;
  std::vector<size_t> recv_counts;  // one per rank
  std::vector<size_t> recv_displs;  // one per rank (empty = packed)
  DataType dtype = DataType::kFloat32;
  uintptr_t stream = 0;  // device buffers: ordered after this stream's queued work (last: aggregates)
};
struct ReduceScatterArgs {
  const void* send = nullptr;  // size * count elements
  void* recv = nullptr;        // count elements; may equal send + rank*count (in place)
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  RedOp op = RedOp::kSum;
  double scalar = 1.0;
  uintptr_t stream = 0;  // device buffers: ordered after this stream's queued work (last: aggregates)
};
struct ReduceScatterVArgs {
  const void* send = nullptr;  // sum(recv_counts) elements, rank blocks packed in rank order
  void* recv = nullptr;        // recv_counts[rank] elements
  std::vector<size_t> recv_counts;
  DataType dtype = DataType::kFloat32;
  RedOp op = RedOp::kSum;
  double scalar = 1.0;
  uintptr_t stream = 0;  // device buffers: ordered after this stream's queued work (last: aggregates)
};
struct AllToAllArgs {
  const void* send = nullptr;  // size * count elements, block j goes to rank j
  void* recv = nullptr;        // size * count elements, block j came from rank j; may equal send
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  uintptr_t stream = 0;  // device buffers: ordered after this stream's queued work (last: aggregates)
};
struct AllToAllVArgs {
  const void* send = nullptr;
  void* recv = nullptr;
  std::vector<size_t> send_counts, send_displs, recv_counts, recv_displs;  // one per rank
  DataType dtype = DataType::kFloat32;
  uintptr_t stream = 0;  // device buffers: ordered after this stream's queued work (last: aggregates)
};
struct GatherArgs {
  const void* send = nullptr;  // count elements; on the root may equal recv + root*count (in place)
  void* recv = nullptr;        // size * count elements on the root
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  int root = 0;
  uintptr_t stream = 0;  // device buffers: ordered after this stream's queued work (last: aggregates)
};
struct ScatterArgs {
  const void* send = nullptr;  // size * count elements on the root
  void* recv = nullptr;        // count elements; on the root may equal send + root*count (in place)
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  int root = 0;
  uintptr_t stream = 0;  // device buffers: ordered after this stream's queued work (last: aggregates)
};
// P2POp::peer of a receive that takes the first message sent to this rank, by any peer, with
// its tag (MPI_ANY_SOURCE, gloo's recvAnysource). It must be alone in its p2p() batch; the
// sender is reported by the Work's OpStats::source. Messages from one peer still arrive in
// the order they were sent: the candidates are each peer's next unreceived message.
constexpr int kAnySource = -1;

// One point-to-point operation of a batch (torch's batch_isend_irecv, or a single send/recv).
// A send may overlap a receive of its batch (in place, like MPI_Sendrecv_replace): it goes out
// from a copy taken before anything is posted. Two receives of a batch must not overlap
// (InvalidArgument).
struct P2POp {
  bool is_send = true;
  void* buf = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  int peer = 0;      // a rank, or kAnySource for a receive
  uint32_t tag = 0;  // p2p ops to one peer match in order; the tag must then be equal too
  uintptr_t stream = 0;  // device buffers: ordered after this stream's queued work (last: aggregates)
};

}  // namespace uccl
