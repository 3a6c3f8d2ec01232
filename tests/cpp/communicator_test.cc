// Whole-stack test of the C++ API with ranks as threads of one process (store, connection
// manager, transports, schedules, engine). Threads rather than processes so that the same
// binary runs under ThreadSanitizer and AddressSanitizer (scripts/sanitizers.sh).
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "uccl/tcp_store.h"
#include "rank_threads.h"
#include "test_util.h"
#include "uccl/communicator.h"

using namespace uccl;

namespace {

using uccl_test::run_ranks;

void wait_ok(Result<WorkPtr> w) {
  REQUIRE_OK(w.status());
  REQUIRE_OK(w.value()->wait(60));
}

void collectives(Communicator& c) {
  const int n = c.size(), r = c.rank();
  for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(100003)}) {
    // all_reduce sum, out of place and in place
    std::vector<float> in(count), out(count, -1.f);
    for (size_t i = 0; i < count; ++i) in[i] = float(r + 1) * float(i % 13);
    wait_ok(c.all_reduce({in.data(), out.data(), count, DataType::kFloat32, RedOp::kSum}));
    CHECK(uccl_test::count_wrong(count, [&](size_t i) { return out[i] == float(n * (n + 1) / 2) * float(i % 13); }) == 0);
    wait_ok(c.all_reduce({in.data(), in.data(), count, DataType::kFloat32, RedOp::kMax}));
    CHECK(uccl_test::count_wrong(count, [&](size_t i) { return in[i] == float(n) * float(i % 13); }) == 0);
    // all_gather
    std::vector<int32_t> mine(count, r), all(count * n, -1);
    wait_ok(c.all_gather({mine.data(), all.data(), count, DataType::kInt32}));
    CHECK(uccl_test::count_wrong(all.size(), [&](size_t i) { return all[i] == int32_t(i / count); }) == 0);
    // reduce_scatter
    std::vector<int64_t> big(count * n, r + 1), part(count, -1);
    wait_ok(c.reduce_scatter({big.data(), part.data(), count, DataType::kInt64, RedOp::kSum}));
    CHECK(uccl_test::count_wrong(count, [&](size_t i) { return part[i] == int64_t(n) * (n + 1) / 2; }) == 0);
    // broadcast and reduce from the last rank
    std::vector<double> b(count, r == n - 1 ? 3.5 : 0.0);
    wait_ok(c.broadcast({b.data(), b.data(), count, DataType::kFloat64, n - 1}));
    CHECK(uccl_test::count_wrong(count, [&](size_t i) { return b[i] == 3.5; }) == 0);
    ReduceArgs ra;
    ra.send = b.data();
    ra.recv = b.data();
    ra.count = count;
    ra.dtype = DataType::kFloat64;
    ra.op = RedOp::kAvg;
    ra.root = n - 1;
    wait_ok(c.reduce(ra));
    if (r == n - 1) CHECK(uccl_test::count_wrong(count, [&](size_t i) { return b[i] == 3.5; }) == 0);
    // all_to_all
    std::vector<int32_t> a2a(count * n), got(count * n, -1);
    for (int p = 0; p < n; ++p)
      for (size_t i = 0; i < count; ++i) a2a[p * count + i] = r * 100 + p;
    wait_ok(c.all_to_all({a2a.data(), got.data(), count, DataType::kInt32}));
    CHECK(uccl_test::count_wrong(got.size(), [&](size_t i) { return got[i] == int32_t(i / count) * 100 + r; }) == 0);
  }
  // p2p ring with a batch, then barrier
  std::vector<int32_t> s(5, r), rv(5, -1);
  std::vector<P2POp> ops = {{true, s.data(), 5, DataType::kInt32, (r + 1) % n, 7},
                            {false, rv.data(), 5, DataType::kInt32, (r - 1 + n) % n, 7}};
  wait_ok(c.p2p(ops));
  for (int v : rv) CHECK(v == (r - 1 + n) % n);
  wait_ok(c.barrier());
  // async ops complete in issue order
  std::vector<WorkPtr> works;
  std::vector<std::vector<float>> bufs(8, std::vector<float>(1000, 1.f));
  for (auto& buf : bufs) works.push_back(c.all_reduce({buf.data(), buf.data(), 1000, DataType::kFloat32, RedOp::kSum}).value());
  REQUIRE_OK(works.back()->wait(60));
  for (auto& w : works) CHECK(w->is_completed());
  for (auto& buf : bufs) CHECK(buf[999] == float(n));
}

void split_test(Communicator& c) {
  auto sub = c.split(c.rank() % 2, -c.rank());
  REQUIRE_OK(sub.status());
  Communicator& s = *sub.value();
  int32_t v = c.rank(), sum = 0;
  wait_ok(s.all_reduce({&v, &sum, 1, DataType::kInt32, RedOp::kSum}));
  int expect = 0;
  for (int p = c.rank() % 2; p < c.size(); p += 2) expect += p;
  CHECK(sum == expect);
  CHECK(s.rank() == (s.size() - 1) - c.rank() / 2);  // key = -rank reverses the order
}

void errors_test(Communicator& c) {
  // Bad arguments fail at once and leave the communicator usable.
  auto bad = c.all_reduce({nullptr, nullptr, 10, DataType::kFloat32, RedOp::kSum});
  CHECK((!bad.ok() && bad.status().code() == Code::kInvalidArgument));
  auto bad_root = c.broadcast({nullptr, nullptr, 0, DataType::kFloat32, c.size()});
  CHECK((!bad_root.ok() && bad_root.status().code() == Code::kInvalidArgument));
  wait_ok(c.barrier());
  // Mismatched collectives: rank 0 all_reduce, others all_gather of the same bytes.
  if (c.size() > 1) {
    std::vector<float> x(4, 1.f), y(4 * c.size());
    auto w = c.rank() == 0 ? c.all_reduce({x.data(), x.data(), 4, DataType::kFloat32, RedOp::kSum})
                           : c.all_gather({x.data(), y.data(), 4, DataType::kFloat32});
    REQUIRE_OK(w.status());
    Status s = w.value()->wait(20);
    CHECK(!s.ok());
    CHECK((s.code() == Code::kMismatch || s.code() == Code::kRemoteError));
    // The communicator is now failed and says why.
    auto again = c.barrier();
    CHECK(!again.ok());
  }
}

}  // namespace

TEST_CASE("every collective on 1-4 ranks, tcp and shm, every algorithm; split; errors") {
  for (const char* transport : {"tcp", "shm"}) {
    for (const char* algo : {"auto", "ring", "direct"}) {
      for (int n : {1, 2, 3, 4}) {
        CAPTURE(transport);
        CAPTURE(algo);
        CAPTURE(n);
        CommOptions o;
        o.transport = transport;
        o.algorithm = algo;
        o.timeout_s = 60;
        run_ranks(n, o, collectives);
      }
    }
    CAPTURE(transport);
    CommOptions o;
    o.transport = transport;
    o.timeout_s = 60;
    run_ranks(4, o, split_test);
    run_ranks(3, o, errors_test);
  }
}

TEST_CASE("abort() from another thread unblocks a receive that has no sender") {
  CommOptions o;
  o.timeout_s = 60;
  run_ranks(2, o, [](Communicator& c) {
    if (c.rank() != 0) {  // stay alive (connected, but never sending) while rank 0 aborts
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      return;
    }
    int32_t v = 0;
    auto w = c.p2p({{false, &v, 1, DataType::kInt32, 1, 0}});
    REQUIRE_OK(w.status());
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      c.abort("test abort");
    });
    Status s = w.value()->wait(30);
    aborter.join();
    CHECK(s.code() == Code::kAborted);
    CHECK(c.error().code() == Code::kAborted);
  });
}
