// Registration cache for user buffers (one per protection domain, thread safe).
//
// Why a cache: ibv_reg_mr pins and maps every page (tens of microseconds per MiB); collectives
// reuse the same buffers op after op, so a registration should be paid once.
//
// Why it is dangerous, and what we do about it: a registration pins the *physical* pages that
// backed the range when it was made. If the application frees the buffer (munmap, or free() of
// an mmap'ed chunk, or madvise(DONTNEED) of a trimmed heap) and a new allocation lands at the same
// address, a cached entry still points at the old pages: RDMA would read stale data or write
// where nobody looks, silently. glibc calls munmap internally, so interposing munmap does not
// see it. So every cache hit is validated:
//  * Page identity (exact): at registration we record the page frame numbers from
//    /proc/self/pagemap; a hit compares them with the current ones. Pinned pages cannot move, so
//    any difference means the range was remapped: the entry is dropped and the range registered
//    again ("re-register on mismatch"). The kernel shows frame numbers only to CAP_SYS_ADMIN.
//  * Without that privilege, entries live only while a pending request uses them (the API
//    contract guarantees the buffer stays valid until its request completes) and are deregistered
//    on the last release; so correctness never depends on privilege, only reuse does.
//  * verbs_mr_cache_invalidate(addr, len) lets an allocator (e.g. a caching allocator's free
//    hook) drop entries explicitly.
// Ranges are page aligned. Entries are used for sends (local read) and receives (local + remote
// write); read-only memory is registered for sends without write access.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "uccl/status.h"
#include "transports/verbs/ibverbs_loader.h"
#include "transports/verbs/verbs_transport.h"

namespace uccl {

struct MrEntry;

// A counted reference to a cached registration; release it with MrCache::release().
struct MrRef {
  MrEntry* entry = nullptr;
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  explicit operator bool() const { return entry != nullptr; }
};

class MrCache {
 public:
  MrCache(const IbvApi* api, ibv_pd* pd, std::string device_name);
  ~MrCache();

  // A registration covering [addr, addr+len) with remote write access if `remote_write`.
  Result<MrRef> acquire(const void* addr, size_t len, bool remote_write);
  void release(MrRef* ref);
  void invalidate(const void* addr, size_t len);
  VerbsMrCacheStats stats();

  // Tests: pretend frame numbers are hidden (the unprivileged mode) or not.
  void set_page_check_for_testing(bool on);

 private:
  bool same_pages(const MrEntry& e, uintptr_t start, uintptr_t end);
  std::vector<uint64_t> read_frames(uintptr_t start, uintptr_t end);
  void drop(std::list<std::unique_ptr<MrEntry>>::iterator it);  // deregisters
  void evict_unused();

  const IbvApi* api_;
  ibv_pd* pd_;
  std::string device_;
  std::mutex mu_;
  std::list<std::unique_ptr<MrEntry>> entries_;  // most recently used first
  std::list<std::unique_ptr<MrEntry>> doomed_;   // invalid but still referenced
  bool page_check_ = false;
  int pagemap_fd_ = -1;
  size_t cached_bytes_ = 0;
  VerbsMrCacheStats stats_;
};

}  // namespace uccl
