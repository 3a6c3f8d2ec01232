// uccl::Store over a c10d::Store, so that uccl bootstraps through the rendezvous torch already
// made (init_process_group's TCPStore/FileStore, already prefixed per group by torch).
//
// Why catch everything: uccl calls the store from its own threads and reports errors as Status;
// a c10d exception escaping into uccl would cross a thread boundary and terminate the process.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "uccl/store.h"

namespace uccl_torch {

class C10dStoreAdapter : public uccl::Store {
 public:
  explicit C10dStoreAdapter(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  uccl::Status set(const std::string& key, const std::string& value) override {
    try {
      store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
      return uccl::Status::Ok();
    } catch (const std::exception& e) {
      return fail("set", key, e);
    }
  }

  uccl::Result<std::string> get(const std::string& key, double timeout_s) override {
    try {
      uccl::Status s = poll_until_set({key}, timeout_s, "get");
      if (!s.ok()) return s;
      auto v = store_->get(key);
      return std::string(v.begin(), v.end());
    } catch (const std::exception& e) {
      return fail("get", key, e);
    }
  }

  uccl::Status wait(const std::vector<std::string>& keys, double timeout_s) override {
    try {
      return poll_until_set(keys, timeout_s, "wait");
    } catch (const std::exception& e) {
      return fail("wait", keys.empty() ? std::string() : keys.front(), e);
    }
  }

  uccl::Result<int64_t> add(const std::string& key, int64_t delta) override {
    try {
      return store_->add(key, delta);
    } catch (const std::exception& e) {
      return fail("add", key, e);
    }
  }

 private:
  // Waits by polling check() (1 ms, doubling to 50 ms) instead of c10d's blocking wait: torch's
  // TCPStore client holds its one lock for a whole wait, and uccl calls the store from its
  // progress thread (a peer's address while connecting) while a caller's thread may be waiting
  // for a key (a new group's rendezvous): a blocking wait there stalls the progress thread
  // (the tcp store client slices its waits for the same reason). Polling also keeps TCPStore
  // from logging a warning for each wait that times out, where a missing key is a normal answer
  // (uccl looks for a failed peer's record for 0.2 s).
  uccl::Status poll_until_set(const std::vector<std::string>& keys, double timeout_s, const char* what) {
    const auto limit = to_ms(timeout_s);
    const auto deadline = std::chrono::steady_clock::now() + limit;
    auto nap = std::chrono::milliseconds(1);
    while (!store_->check(keys)) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        std::string missing;
        for (const auto& k : keys)
          if (!store_->check({k})) missing += (missing.empty() ? "'" : ", '") + k + "'";
        return uccl::Status(uccl::Code::kTimeout, std::string("torch store ") + what + "(" + missing + "): not set within " +
                                                      std::to_string(limit.count()) + " ms");
      }
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(nap, deadline - now));
      nap = std::min(nap * 2, std::chrono::milliseconds(50));
    }
    return uccl::Status::Ok();
  }

  // uccl: timeout_s < 0 means "the default"; c10d: the store's configured timeout.
  std::chrono::milliseconds to_ms(double timeout_s) const {
    if (timeout_s < 0 || !std::isfinite(timeout_s)) return store_->getTimeout();
    return std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000.0));
  }

  static uccl::Status fail(const char* what, const std::string& key, const std::exception& e) {
    // torch raises DistStoreError with "timeout" in the text for a wait past its deadline.
    // c10::Error::what() appends a C++ backtrace; the short text is what a user wants to read.
    auto* ce = dynamic_cast<const c10::Error*>(&e);
    std::string msg = std::string("torch store ") + what + "('" + key + "'): " +
                      (ce ? ce->what_without_backtrace() : e.what());
    bool timeout = dynamic_cast<const c10::DistStoreError*>(&e) != nullptr &&
                   msg.find("imeout") != std::string::npos;
    return uccl::Status(timeout ? uccl::Code::kTimeout : uccl::Code::kRemoteError, msg);
  }

  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace uccl_torch
