// Store: the key-value rendezvous every rank can reach (set / get / wait / add).
//
// Only bootstrap uses it (publishing PeerInfo, the job secret, split colors), never the data
// path, so implementations favour simplicity over speed. Implementations: TcpStore (uccl's
// own, rank 0 serves it), PrefixStore (namespacing for sub-communicators), and in the Python
// bindings an adapter over any object with set/get/wait/add (torch.distributed.TCPStore, an
// mpi4py-based store) so that uccl joins an existing launcher's rendezvous.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "uccl/status.h"

namespace uccl {

class Store {
 public:
  virtual ~Store() = default;
  virtual Status set(const std::string& key, const std::string& value) = 0;
  // Blocks until the key exists or the timeout passes (kTimeout naming the key).
  virtual Result<std::string> get(const std::string& key, double timeout_s) = 0;
  virtual Status wait(const std::vector<std::string>& keys, double timeout_s) = 0;
  // Atomically adds delta to an integer key (missing = 0) and returns the new value.
  virtual Result<int64_t> add(const std::string& key, int64_t delta) = 0;
  // True if this process serves the store (uccl's TcpStore with its server here). Rank 0 says
  // so to the others, so that when the store disappears with its process they can name rank 0
  // instead of only an address.
  virtual bool served_here() const { return false; }
};

// Prepends a prefix to every key: sub-communicators share their parent's store this way.
class PrefixStore : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> inner, std::string prefix)
      : inner_(std::move(inner)), prefix_(std::move(prefix)) {}
  Status set(const std::string& k, const std::string& v) override { return inner_->set(prefix_ + k, v); }
  Result<std::string> get(const std::string& k, double t) override { return inner_->get(prefix_ + k, t); }
  Status wait(const std::vector<std::string>& keys, double t) override {
    std::vector<std::string> p;
    for (auto& k : keys) p.push_back(prefix_ + k);
    return inner_->wait(p, t);
  }
  Result<int64_t> add(const std::string& k, int64_t d) override { return inner_->add(prefix_ + k, d); }
  bool served_here() const override { return inner_->served_here(); }

 private:
  std::shared_ptr<Store> inner_;
  std::string prefix_;
};

}  // namespace uccl
