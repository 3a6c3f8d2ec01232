#include "transports/verbs/verbs_mr_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/log.h"

namespace uccl {

struct MrEntry {
  uintptr_t start = 0, end = 0;  // page aligned
  ibv_mr* mr = nullptr;
  bool remote_write = false;
  bool valid = true;
  int refs = 0;
  std::vector<uint64_t> frames;  // page frame numbers at registration (page check mode)
};

namespace {
constexpr size_t kMaxCachedBytes = size_t(4) << 30;  // unreferenced entries beyond: LRU eviction
constexpr size_t kMaxEntries = 512;
constexpr uint64_t kPfnMask = (uint64_t(1) << 55) - 1;
constexpr uint64_t kPresent = uint64_t(1) << 63;

size_t page_size() {
  static const size_t p = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return p;
}
}  // namespace

MrCache::MrCache(const IbvApi* api, ibv_pd* pd, std::string device_name)
    : api_(api), pd_(pd), device_(std::move(device_name)) {
  pagemap_fd_ = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (pagemap_fd_ >= 0) {
    // Frame numbers read as 0 without CAP_SYS_ADMIN: probe with a page we know is present.
    static volatile char probe[1] = {1};
    probe[0] = 2;
    auto f = read_frames(reinterpret_cast<uintptr_t>(probe), reinterpret_cast<uintptr_t>(probe) + 1);
    page_check_ = !f.empty() && (f[0] & kPresent) && (f[0] & kPfnMask) != 0;
  }
  stats_.page_check = page_check_;
  UCCL_INFO("verbs %s: registration cache %s", device_.c_str(),
            page_check_ ? "validates hits by page identity"
                        : "keeps registrations only while in use (page frame numbers are hidden)");
}

MrCache::~MrCache() {
  for (auto& e : entries_) api_->dereg_mr(e->mr);
  for (auto& e : doomed_) api_->dereg_mr(e->mr);
  if (pagemap_fd_ >= 0) ::close(pagemap_fd_);
}

std::vector<uint64_t> MrCache::read_frames(uintptr_t start, uintptr_t end) {
  const size_t ps = page_size();
  uintptr_t first = start / ps, last = (end + ps - 1) / ps;
  std::vector<uint64_t> out(last - first);
  size_t want = out.size() * sizeof(uint64_t);
  ssize_t got = pread(pagemap_fd_, out.data(), want, static_cast<off_t>(first * sizeof(uint64_t)));
  if (got != static_cast<ssize_t>(want)) out.clear();
  return out;
}

bool MrCache::same_pages(const MrEntry& e, uintptr_t start, uintptr_t end) {
  if (e.frames.empty()) return false;
  auto now = read_frames(start, end);
  if (now.empty()) return false;
  size_t off = (start - e.start) / page_size();
  for (size_t i = 0; i < now.size(); ++i) {
    if (!(now[i] & kPresent) || ((now[i] ^ e.frames[off + i]) & kPfnMask)) return false;
  }
  return true;
}

Result<MrRef> MrCache::acquire(const void* addr, size_t len, bool remote_write) {
  const size_t ps = page_size();
  uintptr_t start = reinterpret_cast<uintptr_t>(addr) / ps * ps;
  uintptr_t end = (reinterpret_cast<uintptr_t>(addr) + (len ? len : 1) + ps - 1) / ps * ps;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    MrEntry& e = **it;
    if (!e.valid || e.start > start || e.end < end || (remote_write && !e.remote_write)) {
      ++it;
      continue;
    }
    // An entry in use covers a live buffer (requests keep their buffers valid): no check.
    if (e.refs == 0 && !same_pages(e, start, end)) {
      ++stats_.stale;
      UCCL_INFO("verbs %s: cached registration [%#lx, %#lx) is stale (memory remapped), registering again",
                device_.c_str(), static_cast<unsigned long>(e.start), static_cast<unsigned long>(e.end));
      auto next = std::next(it);
      drop(it);
      it = next;
      continue;
    }
    ++e.refs;
    ++stats_.hits;
    entries_.splice(entries_.begin(), entries_, it);  // most recently used first
    return MrRef{&e, e.mr->lkey, e.mr->rkey};
  }

  int access = IBV_ACCESS_LOCAL_WRITE | (remote_write ? IBV_ACCESS_REMOTE_WRITE : 0);
  void* base = reinterpret_cast<void*>(start);
  ibv_mr* mr = api_->reg_mr(pd_, base, end - start, access);
  bool writable = true;
  if (!mr && !remote_write && (errno == EFAULT || errno == EACCES || errno == EPERM)) {
    mr = api_->reg_mr(pd_, base, end - start, 0);  // read-only memory (a const send buffer)
    writable = false;
  }
  if (!mr) {
    int err = errno;
    return Status(Code::kSystemError, "verbs " + device_ + ": ibv_reg_mr of " + std::to_string(end - start) +
                                          " bytes at " + std::to_string(start) + " failed: " + std::strerror(err) +
                                          (err == ENOMEM ? " (check ulimit -l, the locked-memory limit)" : ""));
  }
  std::unique_ptr<MrEntry> e(new MrEntry());
  e->start = start;
  e->end = end;
  e->mr = mr;
  e->remote_write = remote_write && writable;
  e->refs = 1;
  if (page_check_) e->frames = read_frames(start, end);
  ++stats_.registrations;
  cached_bytes_ += end - start;
  MrEntry* raw = e.get();
  entries_.push_front(std::move(e));
  evict_unused();
  return MrRef{raw, mr->lkey, mr->rkey};
}

void MrCache::release(MrRef* ref) {
  if (!ref || !ref->entry) return;
  std::lock_guard<std::mutex> lock(mu_);
  MrEntry* e = ref->entry;
  ref->entry = nullptr;
  --e->refs;
  if (e->refs > 0) return;
  for (auto it = doomed_.begin(); it != doomed_.end(); ++it) {
    if (it->get() == e) {
      api_->dereg_mr(e->mr);
      ++stats_.deregistrations;
      doomed_.erase(it);
      return;
    }
  }
  if (!page_check_) {  // no way to validate a later hit: keep nothing unreferenced
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->get() == e) {
        drop(it);
        return;
      }
  }
  evict_unused();
}

void MrCache::drop(std::list<std::unique_ptr<MrEntry>>::iterator it) {
  MrEntry* e = it->get();
  e->valid = false;
  cached_bytes_ -= e->end - e->start;
  if (e->refs > 0) {  // still used by a posted request: deregister on its release
    doomed_.splice(doomed_.end(), entries_, it);
    return;
  }
  api_->dereg_mr(e->mr);
  ++stats_.deregistrations;
  entries_.erase(it);
}

void MrCache::evict_unused() {
  auto it = entries_.end();
  while ((cached_bytes_ > kMaxCachedBytes || entries_.size() > kMaxEntries) && it != entries_.begin()) {
    --it;
    if ((*it)->refs == 0) {
      auto victim = it++;
      drop(victim);
    }
  }
}

void MrCache::invalidate(const void* addr, size_t len) {
  uintptr_t s = reinterpret_cast<uintptr_t>(addr), e = s + len;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto next = std::next(it);
    if ((*it)->start < e && s < (*it)->end) drop(it);
    it = next;
  }
}

VerbsMrCacheStats MrCache::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  VerbsMrCacheStats s = stats_;
  s.entries = entries_.size();
  return s;
}

void MrCache::set_page_check_for_testing(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  page_check_ = on && pagemap_fd_ >= 0;
  stats_.page_check = page_check_;
  if (!page_check_) {
    for (auto it = entries_.begin(); it != entries_.end();) {
      auto next = std::next(it);
      if ((*it)->refs == 0) drop(it);
      it = next;
    }
  }
}

}  // namespace uccl
