// Named shared mappings in /dev/shm (see shared_mapping.h).
#include "base/shared_mapping.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <utility>

namespace uccl {
namespace {

uint64_t random_u64() {
  uint64_t v = 0;
  if (getrandom(&v, sizeof v, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof v)) {
    // No entropy source: the name only needs to be unique, O_EXCL catches the rare collision.
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    v = static_cast<uint64_t>(ts.tv_nsec) * 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(ts.tv_sec);
  }
  return v;
}

Result<void*> map_shared(int fd, size_t bytes, const std::string& name) {
  // MAP_POPULATE: fault the pages in now, not in the middle of the first transfer.
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) return SystemError("mmap " + name, errno);
  // Huge pages cut TLB misses on the rings where tmpfs allows it (shmem_enabled=advise);
  // elsewhere this is a harmless no-op.
  madvise(p, bytes, MADV_HUGEPAGE);
  // Children forked later (DataLoader workers, say) get no copy: they must never touch the rings.
  madvise(p, bytes, MADV_DONTFORK);
  return p;
}

bool process_gone(int pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  char path[64], buf[512];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (!f) return false;
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* paren = std::strrchr(buf, ')');  // the command name may hold spaces and parentheses
  return paren && paren[1] == ' ' && paren[2] == 'Z';
}

// The creator's lock that says "alive" (an OFD lock on the whole file: it dies with its last holder).
bool lock_shared_file(int fd) {
  struct flock l {};
  l.l_type = F_WRLCK;
  l.l_whence = SEEK_SET;  // l_start = l_len = 0: the whole file
  return fcntl(fd, F_OFD_SETLK, &l) == 0;
}

}  // namespace

int remove_stale_shared_files(double min_age_s) {
  DIR* dir = opendir("/dev/shm");
  if (!dir) return 0;
  int removed = 0;
  timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  while (dirent* e = readdir(dir)) {
    int pid = 0;
    char hexpart[32];
    if (std::sscanf(e->d_name, "uccl-%d-%31[0-9a-f]", &pid, hexpart) != 2 || std::strlen(hexpart) != 16) continue;
    if (pid <= 0 || pid == getpid()) continue;
    const std::string path = std::string("/dev/shm/") + e->d_name;
    const int fd = ::open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) continue;
    struct stat st;
    const double age = fstat(fd, &st) == 0 ? static_cast<double>(now.tv_sec - st.st_mtim.tv_sec) +
                                                   (now.tv_nsec - st.st_mtim.tv_nsec) * 1e-9
                                            : -1;
    // Our lock (released by close below) only proves that nobody else holds one.
    const bool stale = S_ISREG(st.st_mode) && st.st_uid == geteuid() && age >= 0 && lock_shared_file(fd) &&
                       (process_gone(pid) || age >= min_age_s);
    if (stale && shm_unlink(("/" + std::string(e->d_name)).c_str()) == 0) ++removed;
    close(fd);
  }
  closedir(dir);
  return removed;
}

SharedMapping& SharedMapping::operator=(SharedMapping&& o) noexcept {
  if (this != &o) {
    release();  // (not this->~SharedMapping(): that would end name_'s life before its reuse)
    base_ = std::exchange(o.base_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    name_ = std::move(o.name_);
    o.name_.clear();
    linked_ = std::exchange(o.linked_, false);
    lock_fd_ = std::exchange(o.lock_fd_, -1);
  }
  return *this;
}

SharedMapping::~SharedMapping() { release(); }

void SharedMapping::release() {
  unlink();
  if (base_) munmap(base_, bytes_);
  base_ = nullptr;
  bytes_ = 0;
}

void SharedMapping::unlink() {
  if (linked_) shm_unlink(name_.c_str());  // ENOENT: the peer already removed it
  linked_ = false;
  if (lock_fd_ >= 0) close(lock_fd_);  // after the name is gone: a janitor never sees it unlocked
  lock_fd_ = -1;
}

Result<SharedMapping> SharedMapping::create(size_t total) {
  char name[64];
  int fd = -1;
  for (int attempt = 0; attempt < 8 && fd < 0; ++attempt) {
    std::snprintf(name, sizeof name, "/uccl-%d-%016" PRIx64, static_cast<int>(getpid()), random_u64());
    fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 && errno != EEXIST) {
      // No usable /dev/shm (missing, read-only, full of inodes): the core falls back to tcp.
      const int e = errno;
      return Status(Code::kNotSupported, std::string("shm_open ") + name + ": " + std::strerror(e));
    }
  }
  if (fd < 0) return SystemError("shm_open: no unused name", EEXIST);

  SharedMapping seg;
  seg.name_ = name;
  seg.linked_ = true;  // from here on, failure paths unlink through the destructor
  // Locked at once and for as long as the name exists: remove_stale_segments() tells a dead
  // creator's leftover from a live one's by the lock. A filesystem without OFD locks (none we
  // know of for tmpfs) only loses that: the segment still works.
  if (lock_shared_file(fd)) seg.lock_fd_ = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  int err = posix_fallocate(fd, 0, static_cast<off_t>(total));
  if (err != 0) {
    close(fd);
    return Status(Code::kNotSupported, "cannot reserve " + std::to_string(total) + " bytes of shared memory for " +
                                           seg.name_ + " (is /dev/shm too small?): " + std::strerror(err));
  }
  Result<void*> p = map_shared(fd, total, seg.name_);
  close(fd);
  if (!p.ok()) return p.status();
  seg.base_ = p.value();
  seg.bytes_ = total;
  return seg;
}

Result<SharedMapping> SharedMapping::open(const std::string& name, size_t total_bytes) {
  if (name.rfind("/uccl-", 0) != 0 || name.find('/', 1) != std::string::npos)
    return InvalidArgument("bad shared memory segment name '" + name + "'");
  int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    // ENOENT: not the same host (or /dev/shm) after all; EACCES: another user. The core can
    // fall back to tcp on kNotSupported.
    const int e = errno;
    return Status(Code::kNotSupported, "cannot open shared memory segment " + name + ": " + std::strerror(e));
  }
  SharedMapping seg;
  seg.name_ = name;
  seg.linked_ = true;
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != total_bytes) {
    close(fd);
    return Status(Code::kRemoteError, "shared memory segment " + name + " has the wrong size");
  }
  Result<void*> p = map_shared(fd, total_bytes, name);
  close(fd);
  if (!p.ok()) return p.status();
  seg.base_ = p.value();
  seg.bytes_ = total_bytes;
  return seg;
}

}  // namespace uccl
