// Ranks as threads for end-to-end C++ tests: one communicator per thread over one TCP store.
//
// run_ranks(n, opts, fn) runs fn(comm) on n ranks, each with its own communicator; every call
// gets a fresh key prefix, so the cases of one binary never see each other's keys. A failed
// REQUIRE ends its rank's thread (uccl_test::run_guarded); the test case fails with it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "uccl/communicator.h"
#include "uccl/tcp_store.h"

namespace uccl_test {

inline void run_ranks(int n, const uccl::CommOptions& opts, const std::function<void(uccl::Communicator&)>& fn) {
  static int generation = 0;
  auto server = uccl::TcpStoreServer::start("127.0.0.1", 0);
  REQUIRE_OK(server.status());
  const int port = server.value()->port();
  const std::string prefix = "gen" + std::to_string(generation++) + "/";
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      run_guarded([&] {
        auto store = uccl::connect_tcp_store("127.0.0.1", port, 30);
        REQUIRE_OK(store.status());
        auto comm = uccl::Communicator::create(r, n, std::make_shared<uccl::PrefixStore>(store.value(), prefix), opts);
        REQUIRE_OK(comm.status());
        fn(*comm.value());
      });
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace uccl_test
