// The blocking forms (Communicator::run) and their express path (core/express.cc): results
// equal to the asynchronous calls', ranks mixing both, the cached schedule reused and replaced,
// a blocking call behind a queued operation, failures and timeouts. Ranks are threads, so the
// sanitizer runs (scripts/sanitizers.sh) check the inline operation's locking too.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "rank_threads.h"
#include "test_util.h"
#include "uccl/communicator.h"

using namespace uccl;
using uccl_test::run_ranks;

namespace {

void wait_ok(Result<WorkPtr> w) {
  REQUIRE_OK(w.status());
  REQUIRE_OK(w.value()->wait(60));
}

// Rank r's call i is blocking when (r + i) % 3 != 0: ranks mix run() and issue+wait on every op,
// so the express path's messages must be exactly the asynchronous path's.
bool blocking_on(int rank, int i) { return (rank + i) % 3 != 0; }

void mixed_calls(Communicator& c) {
  const int n = c.size(), r = c.rank();
  std::vector<float> x(64), y(64);
  std::vector<int32_t> mine(16), all(16 * n);
  std::vector<int64_t> big(8 * n), part(8);
  std::vector<double> b(5);
  for (int i = 0; i < 30; ++i) {
    const bool blk = blocking_on(r, i);
    // all_reduce of 2 elements (8 bytes, the latency case) and of 64 on alternate iterations:
    // the cached task's key changes and comes back.
    const size_t count = i % 2 ? 2 : 64;
    for (size_t k = 0; k < count; ++k) x[k] = float(r + 1) * float(k + i);
    AllReduceArgs ar{x.data(), y.data(), count, DataType::kFloat32, RedOp::kSum};
    if (blk) REQUIRE_OK(c.run(ar));
    else wait_ok(c.all_reduce(ar));
    for (size_t k = 0; k < count; ++k) CHECK(y[k] == float(n * (n + 1) / 2) * float(k + i));
    // in place, max
    for (size_t k = 0; k < count; ++k) x[k] = float(r * 10 + int(k) + i);
    AllReduceArgs mx{x.data(), x.data(), count, DataType::kFloat32, RedOp::kMax};
    if (blk) REQUIRE_OK(c.run(mx));
    else wait_ok(c.all_reduce(mx));
    for (size_t k = 0; k < count; ++k) CHECK(x[k] == float((n - 1) * 10 + int(k) + i));
    // all_gather
    std::fill(mine.begin(), mine.end(), r * 1000 + i);
    AllGatherArgs ag{mine.data(), all.data(), mine.size(), DataType::kInt32};
    if (blk) REQUIRE_OK(c.run(ag));
    else wait_ok(c.all_gather(ag));
    for (size_t k = 0; k < all.size(); ++k) CHECK(all[k] == int32_t(k / mine.size()) * 1000 + i);
    // reduce_scatter
    std::fill(big.begin(), big.end(), r + i);
    ReduceScatterArgs rs{big.data(), part.data(), part.size(), DataType::kInt64, RedOp::kSum};
    if (blk) REQUIRE_OK(c.run(rs));
    else wait_ok(c.reduce_scatter(rs));
    for (int64_t v : part) CHECK(v == int64_t(n) * (n - 1) / 2 + int64_t(n) * i);
    // broadcast and reduce from a root that moves
    const int root = i % n;
    std::fill(b.begin(), b.end(), r == root ? 1.5 * i : -1.0);
    BroadcastArgs bc{b.data(), b.data(), b.size(), DataType::kFloat64, root};
    if (blk) REQUIRE_OK(c.run(bc));
    else wait_ok(c.broadcast(bc));
    for (double v : b) CHECK(v == 1.5 * i);
    ReduceArgs rd;
    rd.send = b.data();
    rd.recv = r == root ? b.data() : nullptr;
    rd.count = b.size();
    rd.dtype = DataType::kFloat64;
    rd.op = RedOp::kSum;
    rd.root = root;
    if (blk) REQUIRE_OK(c.run(rd));
    else wait_ok(c.reduce(rd));
    if (r == root)
      for (double v : b) CHECK(v == 1.5 * i * n);
    // another schedule replaces the cached one in between
    if (i % 5 == 4) wait_ok(c.barrier());
  }
}

}  // namespace

TEST_CASE("run() gives the asynchronous results on 1-4 ranks, mixed with issue+wait, tcp and shm") {
  for (const char* transport : {"tcp", "shm"}) {
    for (int n : {1, 2, 3, 4}) {
      CAPTURE(transport);
      CAPTURE(n);
      CommOptions o;
      o.transport = transport;
      o.timeout_s = 60;
      run_ranks(n, o, mixed_calls);
    }
  }
}

// The tiny plan (core/schedule_tiny.cc) runs a blocking call repeated with one key: rank 0
// always blocks, rank 1 always issues and waits, the others alternate, so each message of the
// plan meets the schedule's; other operations in between replace the schedule (the plan is
// made again), a larger direct all_reduce grows the scratch the small one's slots live in, and
// the in-place and out-of-place forms, reduce_scatter and all_gather take turns.
TEST_CASE("run() repeated with one key (tiny plan) matches asynchronous peers on 2-4 ranks") {
  for (const char* transport : {"shm", "tcp"}) {
    for (int n : {2, 3, 4}) {
      CAPTURE(transport);
      CAPTURE(n);
      CommOptions o;
      o.transport = transport;
      o.timeout_s = 60;
      run_ranks(n, o, [](Communicator& c) {
        const int n = c.size(), r = c.rank();
        std::vector<float> big(4096), big_out(4096);
        std::vector<int32_t> mine(3), all(3 * n), part(2), parts(2 * n);
        for (int i = 0; i < 400; ++i) {
          const bool blk = r == 0 || (r > 1 && (i / 7) % 2 == 0);
          float x[2] = {float(r + i), float(2 * r)}, y[2] = {0, 0};
          AllReduceArgs ar{x, y, 2, DataType::kFloat32, RedOp::kSum};
          if (blk) REQUIRE_OK(c.run(ar));
          else wait_ok(c.all_reduce(ar));
          REQUIRE(y[0] == float(n * (n - 1) / 2 + n * i));
          REQUIRE(y[1] == float(n * (n - 1)));
          if (i % 50 == 49) {  // other schedules, and more scratch, in between
            std::fill(big.begin(), big.end(), float(r));
            AllReduceArgs b{big.data(), big_out.data(), big.size(), DataType::kFloat32, RedOp::kMax};
            if (blk) REQUIRE_OK(c.run(b));
            else wait_ok(c.all_reduce(b));
            REQUIRE(big_out[4095] == float(n - 1));
            wait_ok(c.barrier());
          }
          if (i % 100 == 99) {  // a few calls of other keys, each repeated (a plan of its own)
            for (int k = 0; k < 3; ++k) {
              float v = float(r + k);
              AllReduceArgs inplace{&v, &v, 1, DataType::kFloat32, RedOp::kMax};
              if (blk) REQUIRE_OK(c.run(inplace));
              else wait_ok(c.all_reduce(inplace));
              REQUIRE(v == float(n - 1 + k));
              std::fill(mine.begin(), mine.end(), r * 10 + k);
              AllGatherArgs ag{mine.data(), all.data(), mine.size(), DataType::kInt32};
              if (blk) REQUIRE_OK(c.run(ag));
              else wait_ok(c.all_gather(ag));
              for (size_t e = 0; e < all.size(); ++e) REQUIRE(all[e] == int32_t(e / 3) * 10 + k);
              std::fill(parts.begin(), parts.end(), r + k);
              ReduceScatterArgs rs{parts.data(), part.data(), part.size(), DataType::kInt32, RedOp::kSum};
              if (blk) REQUIRE_OK(c.run(rs));
              else wait_ok(c.reduce_scatter(rs));
              REQUIRE(part[0] == n * (n - 1) / 2 + n * k);
            }
          }
        }
      });
    }
  }
}

TEST_CASE("run() behind a queued operation waits for it (issue order holds)") {
  CommOptions o;
  o.timeout_s = 60;
  run_ranks(3, o, [](Communicator& c) {
    const int n = c.size();
    std::vector<float> big(1 << 20, 1.f);
    float small = float(c.rank()), out = -1.f;
    REQUIRE_OK(c.run(AllReduceArgs{&small, &out, 1, DataType::kFloat32, RedOp::kSum}));  // cached now
    for (int round = 0; round < 5; ++round) {
      std::fill(big.begin(), big.end(), 1.f);
      auto w = c.all_reduce({big.data(), big.data(), big.size(), DataType::kFloat32, RedOp::kSum});
      REQUIRE_OK(w.status());
      REQUIRE_OK(c.run(AllReduceArgs{&small, &out, 1, DataType::kFloat32, RedOp::kSum}));
      CHECK(w.value()->is_completed());  // it was issued first: finished before run() returned
      CHECK(out == float(n * (n - 1) / 2));
      CHECK(big[0] == float(n));
      CHECK(big.back() == float(n));
    }
  });
}

TEST_CASE("run() fails with the cause when a peer aborted, and does not hang") {
  CommOptions o;
  o.timeout_s = 60;
  run_ranks(2, o, [](Communicator& c) {
    float v = 1.f, out = 0.f;
    REQUIRE_OK(c.run(AllReduceArgs{&v, &out, 1, DataType::kFloat32, RedOp::kSum}));  // connected
    if (c.rank() == 1) {
      c.abort("test: rank 1 gives up");
      return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    Status s = c.run(AllReduceArgs{&v, &out, 1, DataType::kFloat32, RedOp::kSum});
    CHECK(!s.ok());
    CHECK((s.code() == Code::kRemoteError || s.code() == Code::kAborted));
    CHECK(s.peer() == 1);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30));
    CHECK(!c.run(AllReduceArgs{&v, &out, 1, DataType::kFloat32, RedOp::kSum}).ok());  // failed for good
  });
}

TEST_CASE("run() honours its timeout and names what it waited for") {
  CommOptions o;
  o.timeout_s = 60;
  run_ranks(2, o, [](Communicator& c) {
    float v = 1.f, out = 0.f;
    REQUIRE_OK(c.run(AllReduceArgs{&v, &out, 1, DataType::kFloat32, RedOp::kSum}));
    if (c.rank() == 1) {  // never joins the second call; stays alive until rank 0 timed out
      std::this_thread::sleep_for(std::chrono::milliseconds(2500));
      return;
    }
    Status s = c.run(AllReduceArgs{&v, &out, 1, DataType::kFloat32, RedOp::kSum}, 0.5);
    CHECK(s.code() == Code::kTimeout);
    CHECK(s.message().find("all_reduce #2") != std::string::npos);
    CHECK(s.message().find("rank 1") != std::string::npos);
  });
}

TEST_CASE("run() in a loop while another thread polls the communicator") {
  CommOptions o;
  o.timeout_s = 60;
  run_ranks(2, o, [](Communicator& c) {
    std::atomic<bool> stop{false};
    std::thread poller([&] {
      while (!stop.load()) {
        (void)c.describe();
        (void)c.error();
      }
    });
    int32_t v = c.rank() + 1, out = 0;
    for (int i = 0; i < 2000; ++i) {
      REQUIRE_OK(c.run(AllReduceArgs{&v, &out, 1, DataType::kInt32, RedOp::kSum}));
      REQUIRE(out == 3);
    }
    stop = true;
    poller.join();
  });
}
