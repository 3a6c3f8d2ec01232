// UcclBackend::monitoredBarrier: torch's ProcessGroup.monitored_barrier over the core's
// Communicator::monitored_barrier, its outcome told in Gloo's words (scripts and torch's own
// tests look for them), uccl's reason appended.
#include "backend.h"
#include "convert.h"

namespace uccl_torch {

void UcclBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  const double timeout_s = (opts.timeout.count() < 0 ? group_timeout() : opts.timeout).count() / 1000.0;  // unset: the group's
  const long long timeout_ms = static_cast<long long>(timeout_s * 1000.0 + 0.5);
  if (rank_ == 0 && timeout_ms <= 0 && size_ > 1) {
    C10_THROW_ERROR(DistBackendError, c10::str("Rank 0 timed out in monitoredBarrier after ", timeout_ms,
                                               " ms. No ranks successfully processed in monitoredBarrier."));
  }
  std::shared_ptr<uccl::Communicator> c = live_comm("monitored_barrier");
  std::vector<int> missing;
  uccl::Status s(uccl::Code::kAborted, "the interpreter is shutting down");
  run_without_gil([&] { s = c->monitored_barrier(timeout_s, wait_all_ranks, &missing); });
  if (s.ok()) return;
  if (rank_ != 0) {
    C10_THROW_ERROR(DistBackendError,
                    c10::str("Rank ", rank_, " successfully reached monitoredBarrier, but received errors while "
                             "waiting for send/recv from rank 0. Please check rank 0 logs for faulty rank. (uccl: ",
                             s.to_string(), ")"));
  }
  if (missing.empty()) throw_status(s, "monitored_barrier (rank 0)");
  if (!wait_all_ranks) missing.resize(1);
  const std::string who = missing.size() == 1 ? c10::str("Rank ", missing[0]) : c10::str("Ranks ", c10::Join(", ", missing));
  C10_THROW_ERROR(DistBackendError, c10::str("[Rank 0]: ", who, " failed to pass monitoredBarrier in ", timeout_ms,
                                             " ms (uccl: ", s.to_string(), ")"));
}

}  // namespace uccl_torch
