// The shared-memory transport: two ranks on one host move bytes through a POSIX shm segment.
//
// Why a transport of its own: a loopback TCP socket costs two kernel copies and a syscall per
// message; a shared ring costs one user-space copy on each side (pipelined, so both cores copy
// at once) and no syscall, and for large messages cross-memory attach (process_vm_readv, "CMA")
// costs a single copy straight from the sender's buffer into the receiver's.
//
// Setup (the core authenticates the peer over TCP first and hands us one connected socket):
//   active  start_connect(): creates and maps the segment "/uccl-<pid>-<random>"; offer() names it
//   passive accept():        maps it, unlinks the name, probes CMA, answers
//   active  finish():        unlinks the name (so a crash leaves nothing in /dev/shm), probes CMA
// The socket then only tells us when the peer dies (the kernel closes it): no data travels on
// it. See shm_endpoint.h for the data path and shm_segment.h for the memory layout.
//
// Errors the core should know: start_connect() and accept() answer kNotSupported when shared
// memory cannot be used after all (/dev/shm too small, segment not visible: another container
// or user), and the connection manager then tries the next transport of the table for that
// peer (tcp), see transports/registry.h. The table entry is in shm_register.cc.
#pragma once

#include <cstddef>
#include <memory>

#include "base/config.h"
#include "transports/transport.h"

namespace uccl {

// The shm settings (declared in shm_transport.cc; defaults and meanings there).
extern const BytesSetting kShmRingBytes;    // UCCL_SHM_RING_BYTES
extern const BoolSetting kShmCma;           // UCCL_SHM_CMA
extern const BytesSetting kShmCmaMinBytes;  // UCCL_SHM_CMA_MIN_BYTES
extern const BytesSetting kShmCmaMaxBytes;  // UCCL_SHM_CMA_MAX_BYTES
extern const BoolSetting kShmCmaPush;       // UCCL_SHM_CMA_PUSH
extern const BytesSetting kShmPushMinBytes;  // UCCL_SHM_PUSH_MIN_BYTES

// Knobs of one shm transport instance. make_shm_transport() fills them from the settings
// above (from_config()); tests and benchmarks pass their own so that one process can compare
// ring and CMA without touching the environment. Fields with a setting start at its default.
struct ShmOptions {
  size_t ring_bytes = kShmRingBytes.default_value();  // per direction; rounded up to a power of two >= 4 pieces
  bool cma = kShmCma.default_value();  // allow single-copy process_vm_readv for large messages
  size_t cma_min_bytes = kShmCmaMinBytes.default_value();  // messages at least this large use CMA (when it works)
  // ... and at most this large, unless the sender receives at the same time (SendRequest::
  // duplex). Beyond the last-level cache both paths are bound by DRAM, and the pipelined ring
  // splits that traffic over both cores (the sender reads, the receiver writes) where one
  // pulling core does all of it: measured on the 2-core dev VM, one-way messages of 32 MiB and
  // more moved 10-35% faster by ring (broadcast 256 MiB: 57.7 vs 63.6 ms), 16 MiB and smaller
  // up to 1.5x faster by CMA. When both cores are busy with their own receive the ring's extra
  // copy is pure cost: all_reduce 256 MiB 69 ms by ring, 58 ms by CMA; all_gather 50.6 vs 41 ms.
  size_t cma_max_bytes = kShmCmaMaxBytes.default_value();
  size_t piece_bytes = 64 << 10;     // the writer publishes (and the reader consumes) this much at a time
  size_t cma_chunk_bytes = 1 << 20;  // a CMA copy pulls this much per process_vm_readv call
  // Push instead of pull where the receiver posted first (ShmEndpoint, "CMA push"): the sender
  // writes into the receiver's buffer with process_vm_writev, a chunk at a time.
  bool cma_push = kShmCmaPush.default_value();
  size_t push_chunk_bytes = 256 << 10;  // stays in L2 between the tee copy and the write
  // Exchange-step messages into a final receive (RecvRequest::final: all_gather's and
  // broadcast's blocks) are pushed from this size, below cma_min_bytes: the receiver never
  // reads them, so its copy out of the ring is pure cost. At most cma_min_bytes (the transport
  // clamps it).
  size_t push_min_bytes = kShmPushMinBytes.default_value();
  size_t tee_stream_min_bytes = 16 << 20;  // tee copies this large bypass the cache (stream_copy)
  size_t cma_bounce_bytes = 128 << 10;  // a CMA reduce pulls this much, then reduces it (stays in L2)
  static ShmOptions from_config();
};

std::unique_ptr<Transport> make_shm_transport();
std::unique_ptr<Transport> make_shm_transport(const ShmOptions& options);

}  // namespace uccl
