// Communicator::monitored_barrier (contract in include/uccl/communicator.h): Gloo's
// monitoredBarrier over uccl's point-to-point messages.
//
// Why receives from any source on rank 0: each rank's arrival is taken as it comes, so at the
// deadline rank 0 knows every rank that arrived and can name all the others (Gloo receives from
// the ranks one after another). Why rank 0's answer is waited for twice as long by the others:
// rank 0 measures its timeout from its own start; an arrived rank that gave up first would fail
// its communicator and close its connections, and rank 0 would then see it fail instead of
// naming the rank that never came.
#include <algorithm>
#include <chrono>
#include <set>
#include <string>

#include "base/log.h"
#include "core/communicator_impl.h"

namespace uccl {
namespace {

constexpr uint32_t kMonitoredBarrierTag = 0x6d626172;  // "mbar": the caller's tags come from user code

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

}  // namespace

Status CommunicatorImpl::monitored_barrier(double timeout_s, bool wait_all_ranks, std::vector<int>* missing) {
  using Clock = std::chrono::steady_clock;
  if (missing) missing->clear();
  if (timeout_s < 0) timeout_s = engine_->timeout_s();
  const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
  auto left = [&] { return std::max(0.0, std::chrono::duration<double>(deadline - Clock::now()).count()); };
  const std::string within = "within " + seconds_text(timeout_s);
  uint8_t byte = 0;
  auto issue = [&](int peer, bool is_send) {
    P2POp op;
    op.is_send = is_send;
    op.buf = &byte;
    op.count = 1;
    op.dtype = DataType::kUint8;
    op.peer = peer;
    op.tag = kMonitoredBarrierTag;
    return p2p({op});
  };

  if (rank_ != 0) {
    auto sent = issue(0, true);
    if (!sent.ok()) return sent.status().with_context("monitored_barrier");
    auto answer = issue(0, false);
    if (!answer.ok()) return answer.status().with_context("monitored_barrier");
    Status s = sent.value()->wait(left() + timeout_s);
    if (s.ok()) s = answer.value()->wait(left() + timeout_s);
    if (s.ok()) return s;
    return Status(s.code(), "monitored_barrier: rank " + std::to_string(rank_) +
                                " arrived but got no answer from rank 0 (which names the ranks that did not "
                                "arrive) within twice the timeout of " + seconds_text(timeout_s) + ": " + s.message(),
                  0);
  }
  if (size_ == 1) return Status::Ok();
  if (timeout_s <= 0) {
    for (int p = 1; missing && p < size_; ++p) missing->push_back(p);
    return Status(Code::kTimeout, "monitored_barrier: rank 0 timed out at once (a timeout of 0 s)", 1);
  }
  std::set<int> arrived;
  Status failure;
  for (int i = 1; i < size_; ++i) {
    auto w = issue(kAnySource, false);
    if (!w.ok()) return w.status().with_context("monitored_barrier");
    failure = w.value()->wait(left());
    if (!failure.ok()) break;
    arrived.insert(w.value()->stats().source);
  }
  std::vector<int> absent;
  for (int p = 1; p < size_; ++p)
    if (!arrived.count(p)) absent.push_back(p);
  if (absent.empty()) {
    std::vector<WorkPtr> answers;
    for (int p = 1; p < size_; ++p) {
      auto w = issue(p, true);
      if (!w.ok()) return w.status().with_context("monitored_barrier (rank 0 answering the others)");
      answers.push_back(w.take());
    }
    for (auto& w : answers) {
      Status s = w->wait(left() + timeout_s);
      if (!s.ok()) return s.with_context("monitored_barrier (rank 0 answering the others)");
    }
    return Status::Ok();
  }
  // A rank that died is what uccl's error names; otherwise every rank that did not come in time.
  const bool died = failure.code() != Code::kTimeout && failure.peer() > 0 && !arrived.count(failure.peer());
  if (died) absent = {failure.peer()};
  if (missing) *missing = absent;
  std::vector<int> named = absent;
  if (!wait_all_ranks) named.resize(1);
  const std::string who = named.size() == 1 ? "rank " + std::to_string(named[0]) : "ranks " + rank_list(named);
  return Status(died ? failure.code() : Code::kTimeout,
                "monitored_barrier: " + who + (died ? " failed before arriving: " + failure.message()
                                                    : " did not arrive " + within + " (" + failure.message() + ")"),
                named[0]);
}

}  // namespace uccl
