// Communicator::estimate / estimate_p2p and uccl::Estimator, ranks as threads: predictions are
// made locally (a rank estimates while its peers are long gone), grow with the bytes, refuse bad
// input by code; the Estimator answers every operation with a completed Work without touching a
// buffer, adds up exactly what estimate() says for the same request, refuses what would need
// the peers, and a failed communicator's estimator fails as the communicator would.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "rank_threads.h"
#include "test_util.h"
#include "uccl/communicator.h"
#include "uccl/estimator.h"

using namespace uccl;
using uccl_test::run_ranks;

namespace {

double est(Communicator& c, Collective coll, size_t bytes, int root = 0) {
  auto t = c.estimate(coll, bytes, root);
  REQUIRE_OK(t.status());
  return t.value();
}

}  // namespace

TEST_CASE("estimate: local, positive, growing with the bytes; bad input refused by code") {
  std::atomic<int> gone{0};
  run_ranks(3, {}, [&](Communicator& c) {
    if (c.rank() != 0) {
      ++gone;  // the others leave at once: an estimate must not need them
      return;
    }
    while (gone.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const auto t0 = std::chrono::steady_clock::now();
    for (Collective k : {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                         Collective::kBroadcast, Collective::kReduce, Collective::kAllToAll, Collective::kGather,
                         Collective::kScatter, Collective::kAllGatherV, Collective::kReduceScatterV,
                         Collective::kAllToAllV}) {
      INFO(collective_name(k));
      const double small = est(c, k, 1 << 10), large = est(c, k, 64 << 20);
      CHECK(small > 0);
      CHECK(large > small);
    }
    CHECK(est(c, Collective::kBarrier, 0) > 0);
    CHECK(est(c, Collective::kBroadcast, 1 << 20, 2) > 0);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));

    CHECK(c.estimate(Collective::kSendRecv, 8).status().code() == Code::kInvalidArgument);
    CHECK(c.estimate(Collective::kReduce, 8, 3).status().code() == Code::kInvalidArgument);
    CHECK(c.estimate(static_cast<Collective>(99), 8).status().code() == Code::kInvalidArgument);

    P2POp send{true, nullptr, 1 << 20, DataType::kFloat32, 1, 0};
    P2POp recv{false, nullptr, 1 << 20, DataType::kFloat32, kAnySource, 0};
    auto one = c.estimate_p2p({send});
    REQUIRE_OK(one.status());
    CHECK(one.value() > 0);
    auto both = c.estimate_p2p({send, recv});
    REQUIRE_OK(both.status());
    CHECK(both.value() >= one.value());
    P2POp bad = send;
    bad.peer = 7;
    CHECK(c.estimate_p2p({bad}).status().code() == Code::kInvalidArgument);
  });
}

TEST_CASE("estimate: a communicator of one predicts nothing to do") {
  run_ranks(1, {}, [](Communicator& c) { CHECK(est(c, Collective::kAllReduce, 64 << 20) == 0.0); });
}

TEST_CASE("Estimator: completed works, buffers untouched, the sum of the same requests' estimates") {
  run_ranks(2, {}, [](Communicator& c) {
    const int n = c.size();
    Estimator e(std::shared_ptr<Communicator>(&c, [](Communicator*) {}));
    const size_t count = 1 << 16;
    std::vector<float> in(count * n, 1.0f + c.rank()), out(count * n, -7.0f);
    double want = 0;
    auto done = [&](Result<WorkPtr> w) {
      REQUIRE_OK(w.status());
      CHECK(w.value()->is_completed());
      CHECK_OK(w.value()->wait());
    };
    AllReduceArgs ar;
    ar.send = in.data(), ar.recv = out.data(), ar.count = count;
    done(e.all_reduce(ar));
    want += est(c, Collective::kAllReduce, count * 4);
    AllGatherArgs ag;
    ag.send = in.data(), ag.recv = out.data(), ag.count = count;
    done(e.all_gather(ag));
    want += est(c, Collective::kAllGather, count * n * 4);
    ReduceScatterArgs rs;
    rs.send = in.data(), rs.recv = out.data(), rs.count = count;
    done(e.reduce_scatter(rs));
    want += est(c, Collective::kReduceScatter, count * n * 4);
    AllToAllVArgs av;
    av.send = in.data(), av.recv = out.data(), av.dtype = DataType::kFloat32;
    av.send_counts = av.recv_counts = std::vector<size_t>(n, count);
    done(e.all_to_all_v(av));
    want += est(c, Collective::kAllToAllV, count * n * 4);
    BroadcastArgs bc;
    bc.send = in.data(), bc.recv = out.data(), bc.count = count, bc.root = 1;
    done(e.broadcast(bc));
    want += est(c, Collective::kBroadcast, count * 4, 1);
    done(e.barrier());
    want += est(c, Collective::kBarrier, 0);
    P2POp p{true, in.data(), count, DataType::kFloat32, 1 - c.rank(), 3};
    done(e.p2p({p}));
    auto pt = c.estimate_p2p({p});
    REQUIRE_OK(pt.status());
    want += pt.value();

    CHECK(e.operations() == 7);
    CHECK_OK(e.first_error());
    CHECK(e.seconds() == doctest::Approx(want).epsilon(1e-12));
    CHECK(std::all_of(in.begin(), in.end(), [&](float v) { return v == 1.0f + c.rank(); }));
    CHECK(std::all_of(out.begin(), out.end(), [](float v) { return v == -7.0f; }));

    // Checked as the communicator checks: a bad dtype or root fails the call, not the estimate.
    AllReduceArgs bad = ar;
    bad.dtype = static_cast<DataType>(42);
    CHECK(e.all_reduce(bad).status().code() == Code::kInvalidArgument);
    BroadcastArgs far = bc;
    far.root = 5;
    CHECK(e.broadcast(far).status().code() == Code::kInvalidArgument);
    AllGatherVArgs short_counts;
    short_counts.recv_counts = {1};
    CHECK(e.all_gather_v(short_counts).status().code() == Code::kInvalidArgument);
    CHECK(e.split(0, 0).status().code() == Code::kNotSupported);
    CHECK(e.operations() == 7);

    // The real communicator still runs (nothing of the estimate reached the peers).
    AllReduceArgs real = ar;
    real.recv = out.data();
    auto w = c.all_reduce(real);
    REQUIRE_OK(w.status());
    REQUIRE_OK(w.value()->wait(60));
    CHECK(out[0] == 3.0f);
  });
}

TEST_CASE("Estimator over an aborted communicator fails as the communicator would") {
  run_ranks(2, {}, [](Communicator& c) {
    Estimator e(std::shared_ptr<Communicator>(&c, [](Communicator*) {}));
    e.abort("test");  // the real communicator's abort
    CHECK(c.error().code() == Code::kAborted);
    CHECK(e.barrier().status().code() == Code::kAborted);
    CHECK(e.operations() == 0);
  });
}
