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
      // c10d::Store::get waits with the store's own timeout; wait first with ours. Short waits
      // (uccl looks for a failed peer's record for 0.2 s) poll instead: a TCPStore client logs
      // a warning for every wait that times out, and a missing record is a normal answer.
      auto limit = to_ms(timeout_s);
      if (limit <= std::chrono::milliseconds(1000)) {
        auto deadline = std::chrono::steady_clock::now() + limit;
        while (!store_->check({key})) {
          if (std::chrono::steady_clock::now() >= deadline) {
            return uccl::Status(uccl::Code::kTimeout, "torch store get('" + key + "'): not set within " +
                                                          std::to_string(limit.count()) + " ms");
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
      } else {
        store_->wait({key}, limit);
      }
      auto v = store_->get(key);
      return std::string(v.begin(), v.end());
    } catch (const std::exception& e) {
      return fail("get", key, e);
    }
  }

  uccl::Status wait(const std::vector<std::string>& keys, double timeout_s) override {
    try {
      store_->wait(keys, to_ms(timeout_s));
      return uccl::Status::Ok();
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
