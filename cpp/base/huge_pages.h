// Large buffers that are streamed through once per operation sit on transparent huge pages
// where the system offers them, as numpy's large arrays do. Why: 4 KiB pages cost TLB misses
// and, for a peer's CMA read, one page walk each. Measured: a 4-rank 64 MiB all_reduce of a
// torch tensor (4 KiB pages) took 35-38 ms against 30-31 for a numpy array of the same size;
// the simulated device's memory on shared 4 KiB pages cost the 2-rank 64 MiB staged all_reduce
// ~25% of its CPU and some launches 3x (benchmarks/RESULTS.md, 2026-12-03).
//
// Used by: an algorithm's host scratch (algorithms/schedule.cc ScratchArena), the simulated
// device's memory (base/sim_device.cc). Where the kernel gives no huge pages the advice is
// refused and nothing else changes.
#pragma once

#include <cstddef>

namespace uccl {

constexpr size_t kHugePage = size_t(2) << 20;  // one x86 huge page

// Fresh zeroed private memory of `bytes` (a page multiple): from kHugePage up 2 MiB-aligned and
// advised for huge pages. nullptr (errno set) when the mapping fails. Give it back with
// unmap_pages(p, bytes).
char* map_pages(size_t bytes);
void unmap_pages(void* p, size_t bytes);

}  // namespace uccl
