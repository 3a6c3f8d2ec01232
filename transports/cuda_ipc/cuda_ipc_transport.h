// cuda_ipc: ranks on one host whose buffers are CUDA memory move them GPU to GPU, without the
// host: the receiver maps the sender's allocation (a CUDA IPC handle sent over the connection,
// mapped once per allocation and cached) and copies out of it, or reduces out of it with the
// reduce kernel, on its own stream. Several ranks on one GPU work (CUDA IPC between processes
// of one device is allowed; NCCL refuses it as "Duplicate GPU"), and two ranks that are threads
// of one process use each other's pointers directly.
//
// Why it wraps a host endpoint: a pair is connected once, but each message may be host or
// device memory on either side (mixed communicators, a CUDA process passing a numpy array).
// So the pair runs over an inner shm endpoint (tcp where shm is not registered), and every
// message is preceded by a fixed-size control record on it:
//   * IPC  {export of the sender's allocation, offset}: the receiver reads the sender's memory
//     (device copy or reduce kernel; into host memory by a device-to-host copy), then answers
//     an ACK record; the sender's request completes on the ACK (its buffer must stay put
//     until the peer has read it: rendezvous, like shm's single-copy path).
//   * INLINE {bytes}: the payload follows as the next inner message (host memory, memory the
//     sender cannot export such as cuMem VMM allocations, other devices' memory staged
//     through the host). A receive into host memory takes it straight into the user's buffer
//     (fused reduce included); into device memory through a host buffer and the device's copy
//     or reduce kernel.
// The receiver keeps a control receive posted whenever it awaits anything (a descriptor or an
// ACK), so ACKs are never stuck behind a payload nobody has asked for: a payload that arrives
// before its receive is posted lands in a buffer of the endpoint (bounded by one message).
//
// Data readiness: a device buffer given to post_send holds its data (the executor queries its
// events before it posts); a receive completes once the device work writing its buffer has
// completed (an event, queried from progress(), never waited on).
//
// Chosen (priority 35, above shm) for pairs on one host when both processes can use CUDA
// (UCCL_CUDA_IPC: auto = CUDA available and this process already has a CUDA context, i.e. it
// uses the GPU; on; off). Without CUDA it answers kNotSupported on either side, and the table
// falls back to shm.
#pragma once

#include <cstdint>
#include <memory>

#include "base/config.h"
#include "transports/transport.h"

namespace uccl {

extern const TextSetting kCudaIpc;  // UCCL_CUDA_IPC: auto | on | off

// Usable in this process now (see UCCL_CUDA_IPC), else why not.
bool cuda_ipc_usable(std::string* why);

std::unique_ptr<Transport> make_cuda_ipc_transport();

}  // namespace uccl
