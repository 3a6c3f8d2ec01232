// UcclBackend::monitoredBarrier: torch's ProcessGroup.monitored_barrier over uccl's
// point-to-point messages (contract in backend.h).
//
// Why receives from any source on rank 0: each rank's arrival is taken as it comes, so at the
// timeout rank 0 knows every rank that arrived and names all the others (Gloo receives from
// the ranks one after another and names the first it timed out on, unless wait_all_ranks).
#include <set>

#include "backend.h"
#include "convert.h"

namespace uccl_torch {
namespace {

// The barrier's own tag: its messages never match a receive of the caller's p2p (tags are
// compared, and the caller's come from torch's int tags: 0 unless set).
constexpr uint32_t kMonitoredBarrierTag = 0x6d626172;  // "mbar"

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

}  // namespace

void UcclBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  using Clock = std::chrono::steady_clock;
  const double timeout_s = opts.timeout.count() < 0  // kUnsetTimeout: the group's
                               ? (opts_.timeout_s > 0 ? opts_.timeout_s : kBackendDefaultTimeout.count() / 1000.0)
                               : opts.timeout.count() / 1000.0;
  const long long timeout_ms = static_cast<long long>(timeout_s * 1000.0 + 0.5);
  if (rank_ == 0 && timeout_ms <= 0) {
    C10_THROW_ERROR(DistBackendError, c10::str("Rank 0 timed out in monitoredBarrier after ", timeout_ms,
                                               " ms. No ranks successfully processed in monitoredBarrier."));
  }
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  auto left = [&] { return std::max(0.0, std::chrono::duration<double>(deadline - Clock::now()).count()); };
  uint8_t byte = 0;
  auto issue = [&](int peer, bool is_send) {
    uccl::P2POp op;
    op.is_send = is_send;
    op.buf = &byte;
    op.count = 1;
    op.dtype = uccl::DataType::kUint8;
    op.peer = peer;
    op.tag = kMonitoredBarrierTag;
    std::lock_guard<std::recursive_mutex> lk(mu_);
    auto r = comm("monitored_barrier").p2p({op});
    if (!r.ok()) throw_status(r.status(), "monitored_barrier (rank " + std::to_string(rank_) + ")");
    return r.take();
  };
  // Waits without the GIL: uccl's threads may need it meanwhile.
  auto wait = [&](const uccl::WorkPtr& w, double t) {
    uccl::Status s = uccl::Status(uccl::Code::kAborted, "the interpreter is shutting down");
    run_without_gil([&] { s = w->wait(t); });
    return s;
  };

  if (rank_ != 0) {
    uccl::WorkPtr sent = issue(0, true);
    uccl::WorkPtr answer = issue(0, false);
    // Rank 0 decides within the timeout from its own start, which may be later than ours: its
    // answer is waited for twice as long, so that an arrived rank does not give up first (its
    // failure would close its connections, and rank 0 would see it fail instead of the absent).
    uccl::Status s = wait(sent, left() + timeout_s);
    if (s.ok()) s = wait(answer, left() + timeout_s);
    if (!s.ok()) {
      // Gloo's words (scripts grep for them), then what uccl saw.
      C10_THROW_ERROR(DistBackendError,
                      c10::str("Rank ", rank_, " successfully reached monitoredBarrier, but received errors while "
                               "waiting for send/recv from rank 0. Please check rank 0 logs for faulty rank. (uccl: ",
                               s.to_string(), "; rank 0's answer was waited for twice the timeout of ", timeout_ms,
                               " ms)"));
    }
    return;
  }
  std::set<int> arrived;
  uccl::Status failure;
  for (int i = 1; i < size_; ++i) {
    uccl::WorkPtr w = issue(uccl::kAnySource, false);
    failure = wait(w, left());
    if (!failure.ok()) break;
    arrived.insert(w->stats().source);
  }
  std::vector<int> missing;
  for (int p = 1; p < size_; ++p)
    if (!arrived.count(p)) missing.push_back(p);
  if (!missing.empty()) {
    // A peer that died is named by uccl's error; otherwise the ranks that did not come in time.
    if (failure.code() != uccl::Code::kTimeout && failure.peer() > 0 && !arrived.count(failure.peer()))
      missing = {failure.peer()};
    if (!wait_all_ranks) missing.resize(1);
    const std::string who = missing.size() == 1 ? "Rank " + std::to_string(missing[0]) : "Ranks " + rank_list(missing);
    C10_THROW_ERROR(DistBackendError, c10::str("[Rank 0]: ", who, " failed to pass monitoredBarrier in ", timeout_ms,
                                               " ms (uccl: ", failure.to_string(), ")"));
  }
  std::vector<uccl::WorkPtr> answers;
  for (int p = 1; p < size_; ++p) answers.push_back(issue(p, true));
  for (auto& w : answers) {
    uccl::Status s = wait(w, left() + timeout_s);
    if (!s.ok()) throw_status(s, "monitored_barrier (rank 0 answering the others)");
  }
}

}  // namespace uccl_torch
