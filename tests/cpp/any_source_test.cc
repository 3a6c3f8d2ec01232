// Any-source receives (P2POp::peer == kAnySource) through the whole stack, ranks as threads:
// the first message from any peer with the receive's tag wins, the sender is reported in
// OpStats::source, per-peer order and per-peer receives keep working around it, a message with
// another tag waits for its own receive, and a peer that is gone fails the receive instead of
// leaving it to its deadline.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "rank_threads.h"
#include "test_util.h"
#include "uccl/communicator.h"
#include "uccl/tcp_store.h"

using namespace uccl;

namespace {

using uccl_test::run_ranks;

std::atomic<int> g_rank1_sent{0};  // scenario 2: rank 1's tag-7 messages are written

P2POp op(bool send, int32_t* buf, size_t count, int peer, uint32_t tag) {
  return P2POp{send, buf, count, DataType::kInt32, peer, tag};
}

// Receives one message from any rank with `tag`; returns the sender.
int recv_any(Communicator& c, int32_t* buf, size_t count, uint32_t tag) {
  auto w = c.p2p({op(false, buf, count, kAnySource, tag)});
  REQUIRE_OK(w.status());
  REQUIRE_OK(w.value()->wait(60));
  return w.value()->stats().source;
}

void send(Communicator& c, int32_t* buf, size_t count, int peer, uint32_t tag) {
  auto w = c.p2p({op(true, buf, count, peer, tag)});
  REQUIRE_OK(w.status());
  REQUIRE_OK(w.value()->wait(60));
}

void scenario(Communicator& c) {
  const int n = c.size(), r = c.rank();
  const size_t count = 3000;  // big enough for several tcp stripes / shm pieces
  std::vector<int32_t> buf(count);
  auto fill = [&](int32_t v) { std::fill(buf.begin(), buf.end(), v); };
  auto all = [&](int32_t v) { return uccl_test::count_wrong(count, [&](size_t i) { return buf[i] == v; }) == 0; };

  // 1. Every other rank sends rank 0 one message with tag 5: rank 0 gets each exactly once.
  if (r == 0) {
    std::vector<int> seen;
    for (int k = 1; k < n; ++k) {
      int src = recv_any(c, buf.data(), count, 5);
      CHECK((src >= 1 && src < n));
      CHECK(all(100 + src));
      seen.push_back(src);
    }
    std::sort(seen.begin(), seen.end());
    for (int k = 1; k < n; ++k) CHECK(seen[k - 1] == k);
    g_rank1_sent.store(0);  // for scenario 2, before the barrier
  } else {
    fill(100 + r);
    send(c, buf.data(), count, 0, 5);
  }
  REQUIRE_OK(c.barrier().value()->wait(60));

  // 2. Tags select: rank 1's tag-7 messages are there first, yet the tag-3 receive takes rank
  //    2's; per-peer order holds (two tag-7 messages from rank 1 arrive in order), and a
  //    receive with a source still works after the any-source ones. (No collective may sit
  //    between a send and its receive: messages of one pair are received in the order sent, so
  //    the ranks signal each other through memory here.)
  if (n >= 3) {
    if (r == 1) {
      fill(71);
      send(c, buf.data(), count, 0, 7);
      fill(72);
      send(c, buf.data(), count, 0, 7);
      g_rank1_sent.store(1);  // both are written before rank 2 sends
      fill(73);
      send(c, buf.data(), count, 0, 9);
    } else if (r == 2) {
      while (g_rank1_sent.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      fill(31);
      send(c, buf.data(), count, 0, 3);
    } else if (r == 0) {
      CHECK(recv_any(c, buf.data(), count, 3) == 2);
      CHECK(all(31));
      CHECK(recv_any(c, buf.data(), count, 7) == 1);
      CHECK(all(71));
      CHECK(recv_any(c, buf.data(), count, 7) == 1);
      CHECK(all(72));
      auto w = c.p2p({op(false, buf.data(), count, 1, 9)});  // a receive with a source
      REQUIRE_OK(w.status());
      REQUIRE_OK(w.value()->wait(60));
      CHECK(w.value()->stats().source == -1);
      CHECK(all(73));
    }
    // Collectives still line up afterwards.
    int32_t v = 1, sum = 0;
    REQUIRE_OK(c.all_reduce({&v, &sum, 1, DataType::kInt32, RedOp::kSum}).value()->wait(60));
    CHECK(sum == n);
  }

  // 3. A zero-byte message matches too.
  if (r == 1) send(c, nullptr, 0, 0, 11);
  if (r == 0) CHECK(recv_any(c, nullptr, 0, 11) == 1);

  // 4. Misuse is refused at the call.
  auto bad = c.p2p({op(true, buf.data(), count, kAnySource, 0)});
  CHECK((!bad.ok() && bad.status().code() == Code::kInvalidArgument));
  auto batch = c.p2p({op(false, buf.data(), 1, kAnySource, 0), op(false, buf.data() + 1, 1, kAnySource, 0)});
  CHECK((!batch.ok() && batch.status().code() == Code::kInvalidArgument));
  REQUIRE_OK(c.barrier().value()->wait(60));
}

}  // namespace

TEST_CASE("any-source receive: first match wins, tags select, order per peer kept; tcp and shm") {
  for (const char* transport : {"tcp", "shm"}) {
    for (int n : {2, 3, 4}) {
      CAPTURE(transport);
      CAPTURE(n);
      CommOptions o;
      o.transport = transport;
      o.timeout_s = 60;
      run_ranks(n, o, scenario);
    }
  }
}

TEST_CASE("any-source receive on a single rank is refused") {
  CommOptions o;
  run_ranks(1, o, [](Communicator& c) {
    int32_t v = 0;
    auto w = c.p2p({op(false, &v, 1, kAnySource, 0)});
    CHECK((!w.ok() && w.status().code() == Code::kInvalidArgument));
  });
}

TEST_CASE("any-source receive: nobody sends -> the deadline names what it waited for") {
  CommOptions o;
  o.timeout_s = 2;
  o.transport = "tcp";
  run_ranks(2, o, [](Communicator& c) {
    int32_t v = 0;
    // Connected first: an idle communicator does not answer a connection handshake (nothing
    // drives it), so a dial to a peer that stays out of uccl ends at the same deadline with
    // "did not answer the connection handshake" instead.
    REQUIRE_OK(c.barrier().value()->wait(60));
    if (c.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(3000));  // connected, silent
      return;
    }
    auto w = c.p2p({op(false, &v, 1, kAnySource, 4)});
    REQUIRE_OK(w.status());
    const auto t0 = std::chrono::steady_clock::now();
    Status s = w.value()->wait(30);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(s.code() == Code::kTimeout);
    CHECK_MESSAGE(s.message().find("any rank (tag 4") != std::string::npos, s.message());
    CHECK(waited < 10);
  });
}

TEST_CASE("any-source receive: a peer that closes fails the receive at once (tcp and shm)") {
  for (const char* transport : {"tcp", "shm"}) {
    CAPTURE(transport);
    CommOptions o;
    o.timeout_s = 60;
    o.transport = transport;
    run_ranks(3, o, [](Communicator& c) {
      int32_t v = 0;
      REQUIRE_OK(c.barrier().value()->wait(60));  // connections up
      if (c.rank() == 2) {
        // Sends one message, then leaves: the message is still delivered, then its closing fails
        // the next any-source receive (rank 1 never sends).
        v = 42;
        send(c, &v, 1, 0, 1);
        return;  // the communicator is destroyed: its connections close
      }
      if (c.rank() == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(4000));
        return;
      }
      CHECK(recv_any(c, &v, 1, 1) == 2);
      CHECK(v == 42);
      auto w = c.p2p({op(false, &v, 1, kAnySource, 1)});
      REQUIRE_OK(w.status());
      const auto t0 = std::chrono::steady_clock::now();
      Status s = w.value()->wait(30);
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      CHECK(s.code() == Code::kRemoteError);
      CHECK(s.peer() == 2);
      CHECK_MESSAGE(s.message().find("any source") != std::string::npos, s.message());
      CHECK(waited < 3.5);  // well before rank 1 leaves, and far from the 60 s deadline
    });
  }
}
