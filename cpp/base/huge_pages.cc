// See huge_pages.h.
#include "base/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>

namespace uccl {

char* map_pages(size_t bytes) {
  if (bytes < kHugePage) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
  }
  // Over-map by one huge page, then give back the parts outside the aligned range.
  void* raw = mmap(nullptr, bytes + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePage - 1) & ~(kHugePage - 1);
  if (aligned > start) munmap(raw, aligned - start);
  const uintptr_t tail = start + kHugePage - aligned;  // what lies past aligned + bytes
  if (tail > 0) munmap(reinterpret_cast<void*>(aligned + bytes), tail);
  char* p = reinterpret_cast<char*>(aligned);
  madvise(p, bytes, MADV_HUGEPAGE);  // a hint: fine if refused
  return p;
}

void unmap_pages(void* p, size_t bytes) {
  if (p) munmap(p, bytes);
}

}  // namespace uccl
