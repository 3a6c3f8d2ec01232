// Cross-memory attach (CMA): process_vm_readv / process_vm_writev copy straight from or into
// another process's memory.
//
// Why probe instead of assuming: CMA needs ptrace permission over the peer (same uid, no
// Yama restriction or PR_SET_PTRACER, no seccomp filter, same pid namespace for the pid to
// mean anything). Containers often break one of these. So during setup the reader pulls a
// known word from the writer (address and value travel in the offer/answer) and records the
// verdict in the segment; any failure simply means "use the ring". A successful probe also
// proves that the pid names the peer, which lets the endpoint watch it with a pidfd.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace uccl {
namespace shm {

// Allows any process of ours to read us (Yama ptrace_scope=1 would otherwise allow only
// ancestors). Called once per process, and only when CMA is enabled; a no-op without Yama.
void cma_allow_peers();

// A word in this process that peers read to prove CMA works: its address and (random) value.
uintptr_t cma_probe_address();
uint64_t cma_probe_value();

// True if `pid` is readable with process_vm_readv and holds `value` at `address`.
bool cma_probe(pid_t pid, uintptr_t address, uint64_t value);

// One process_vm_readv of up to `bytes` from (pid, remote) into local. Returns bytes read
// (possibly fewer: the kernel stops at page boundaries it cannot pin) or -errno.
ssize_t cma_read(pid_t pid, void* local, uintptr_t remote, size_t bytes);
// The other way: one process_vm_writev of up to `bytes` from local into (pid, remote).
ssize_t cma_write(pid_t pid, uintptr_t remote, const void* local, size_t bytes);

}  // namespace shm
}  // namespace uccl
