// A named shared mapping in /dev/shm: the file part of the shm transport's ring segments and of
// the staged transport's shared slots (two transports, one way to make and clean up the files).
//
// Contract:
//  * create(total) makes "/uccl-<pid>-<16 hex digits>", reserves total bytes (posix_fallocate:
//    tmpfs would otherwise accept ftruncate and deliver SIGBUS on first touch when /dev/shm is
//    small, docker's default is 64 MiB), maps it zeroed, and holds an OFD lock on it for as long
//    as the name exists. open(name, total) maps one by name, checked for that size. Both map
//    with MAP_POPULATE, MADV_HUGEPAGE where tmpfs allows it, and MADV_DONTFORK (children forked
//    later, DataLoader workers say, never touch it). A missing or unusable /dev/shm is
//    kNotSupported, so the core can fall back to tcp.
//  * unlink() removes the name (ENOENT is fine: the peer was first; whoever maps it second
//    unlinks it), then drops the lock. Destruction unlinks and unmaps. Movable.
//  * remove_stale_shared_files() removes "/dev/shm/uccl-<pid>-*" left by a creator that died
//    while the name existed (SIGKILLed before its peer mapped it): a name nobody locks is stale
//    when its creator is gone (or a zombie) in our pid namespace, or older than `min_age_s` (a
//    pid reused since). A live creator in another pid namespace sharing /dev/shm keeps its lock,
//    so it is never touched. Only our own files. Returns the count.
#pragma once

#include <cstddef>
#include <string>

#include "uccl/status.h"

namespace uccl {

class SharedMapping {
 public:
  SharedMapping() = default;
  SharedMapping(SharedMapping&& o) noexcept { *this = std::move(o); }
  SharedMapping& operator=(SharedMapping&& o) noexcept;
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;
  ~SharedMapping();

  static Result<SharedMapping> create(size_t total_bytes);
  static Result<SharedMapping> open(const std::string& name, size_t total_bytes);

  void unlink();
  const std::string& name() const { return name_; }
  size_t total_bytes() const { return bytes_; }
  char* base() const { return static_cast<char*>(base_); }

 private:
  void release();  // unlinks and unmaps
  void* base_ = nullptr;
  size_t bytes_ = 0;
  std::string name_;
  bool linked_ = false;
  int lock_fd_ = -1;  // creator: holds the lock while the name exists
};

int remove_stale_shared_files(double min_age_s = 60);

}  // namespace uccl
