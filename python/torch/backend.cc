// UcclBackend lifecycle, point-to-point and coalescing. Collectives are in collectives.cc and collectives_move.cc.
#include "backend.h"

#include <algorithm>

#include "convert.h"
#include "membership.h"
#include "staging.h"
#include "store_adapter.h"

namespace uccl_torch {

uccl::Result<std::shared_ptr<uccl::Communicator>> UcclBackend::create_comm(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, const uccl::CommOptions& opts) {
  if (size <= 0 || rank < 0 || rank >= size) {
    return uccl::Status(uccl::Code::kInvalidArgument,
                        "invalid rank " + std::to_string(rank) + " for group size " + std::to_string(size));
  }
  if (!store) return uccl::Status(uccl::Code::kInvalidArgument, "a store is required");
  UCCL_RETURN_IF_ERROR(check_membership(*store, rank, size, opts.timeout_s));
  return uccl::Communicator::create(rank, size, std::make_shared<C10dStoreAdapter>(store), opts);
}

UcclBackend::UcclBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                         const uccl::CommOptions& opts)
    : c10d::Backend(rank, size), store_(store), opts_(opts), cq_(std::make_shared<CompletionQueue>()) {
  TORCH_CHECK_VALUE(size > 0 && rank >= 0 && rank < size, "uccl: invalid rank ", rank, " for group size ", size);
  auto r = create_comm(store, rank, size, opts);
  if (!r.ok()) {
    throw_status(r.status(), "init_process_group (rank " + std::to_string(rank) + " of " + std::to_string(size) + ")");
  }
  comm_ = r.take();
  init();
}

UcclBackend::UcclBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                         const uccl::CommOptions& opts, std::shared_ptr<uccl::Communicator> comm)
    : c10d::Backend(rank, size), comm_(std::move(comm)), store_(store), opts_(opts),
      cq_(std::make_shared<CompletionQueue>()) {
  TORCH_CHECK_VALUE(comm_ && comm_->rank() == rank && comm_->size() == size, "uccl: communicator does not match rank ",
                    rank, " of ", size);
  init();
}

UcclBackend::~UcclBackend() {
  try {
    shutdown();
  } catch (...) {
    // destructors must not throw; shutdown only fails if uccl itself is broken
  }
}

std::chrono::milliseconds UcclBackend::group_timeout() const {
  return opts_.timeout_s < 0 ? kBackendDefaultTimeout
                             : std::chrono::milliseconds(static_cast<int64_t>(opts_.timeout_s * 1000));
}

c10::intrusive_ptr<c10d::Backend::Options> UcclBackend::getBackendOptions() {
  return c10::make_intrusive<Options>("uccl", group_timeout());
}

uccl::CommOptions UcclBackend::options_with(const c10::intrusive_ptr<Options>& opts) const {
  uccl::CommOptions o = opts_;
  if (opts) {
    if (opts->timeout.count() > 0) o.timeout_s = opts->timeout.count() / 1000.0;
    if (!opts->group_name.empty()) o.name = opts->group_name;
  }
  return o;
}

void UcclBackend::setTimeout(std::chrono::milliseconds timeout) {
  // Applies to works created from now on (their wait() deadline); uccl's own progress-side
  // timeout was fixed when the communicator was created.
  std::lock_guard<std::recursive_mutex> lk(mu_);
  opts_.timeout_s = timeout.count() / 1000.0;
}

std::shared_ptr<uccl::Communicator> UcclBackend::live_comm(const char* op) {
  std::lock_guard<std::recursive_mutex> lk(mu_);
  comm(op);  // throws if this group was shut down or aborted
  return comm_;
}

uccl::Communicator& UcclBackend::comm(const char* op) {
  if (closed_ || !comm_) {
    C10_THROW_ERROR(DistBackendError, c10::str("uccl ", op, ": the process group (rank ", rank_, " of ", size_,
                                               ") was ", closed_why_, "; create a new group to communicate"));
  }
  return *comm_;
}

c10::intrusive_ptr<UcclWork> UcclBackend::make_work(c10d::OpType type, const char* name,
                                                    std::vector<at::Tensor> outputs,
                                                    std::chrono::milliseconds timeout) {
  double timeout_s = timeout == c10d::kUnsetTimeout ? opts_.timeout_s : timeout.count() / 1000.0;
  uint64_t seq = seq_++;
  std::string title = std::string("uccl:") + name;
  // No sequence number here: uccl's message names the op with its own ("all_reduce #12").
  std::string what = std::string(name) + " (rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                     (opts_.name.empty() ? "" : ", group " + opts_.name) + ")";
  auto w = c10::make_intrusive<UcclWork>(rank_, type, title.c_str(), seq, std::move(what), std::move(outputs),
                                         timeout_s, cq_);
  w->count_into(traffic_);
  w->report_to(hook_);
  return w;
}

void UcclBackend::add_op(UcclWork& w, uccl::Result<uccl::WorkPtr> r) {
  if (!r.ok()) {
    // Ops of this work already in flight keep using its staging buffers: arm it so that they
    // stay alive until uccl is done with them, then report the failure.
    if (w.has_ops()) w.start();
    throw_status(r.status(), w.what());
  }
  w.add(r.take());
}

c10::intrusive_ptr<c10d::Work> UcclBackend::launch(const c10::intrusive_ptr<UcclWork>& w) {
  if (w->device()) last_device_ = w->device();
  if (estimator_) w->drop_epilogues();  // nothing ran: the caller's outputs stay as they were
  w->start();
  if (coalescing_) co_colls_.push_back(w);
  return w;
}

// ---------------------------------------------------------------------------------------------
// Point-to-point

c10::intrusive_ptr<c10d::Work> UcclBackend::p2p(std::vector<at::Tensor>& tensors, int peer, int tag, bool is_send) {
  const char* name = is_send ? "send" : "recv";
  check_single(tensors.size(), name, "tensor");
  at::Tensor& t = tensors[0];
  check_tensor(t, name, "tensor");
  const bool any_source = !is_send && peer == uccl::kAnySource;
  TORCH_CHECK_VALUE(any_source || (peer >= 0 && peer < size_), "uccl ", name, ": peer rank ", peer,
                    " is outside the group of size ", size_);
  // A contiguous host tensor or device tensor uccl owns is used in place; a non-contiguous one
  // travels through a contiguous copy on its device or the host, another device's tensor
  // (staged_device) through a host copy (staging.h buffer_for); a recv copies back.
  const bool owned = device_owned(t);
  at::Tensor buf = buffer_for(t, owned, is_send);
  std::function<void()> copy_back;
  if (!is_send && !buf.is_same(t)) copy_back = [t, buf]() mutable { uccl_torch::copy_back(t, buf); };
  Wire wire = move_wire(t.scalar_type());
  uccl::P2POp op;
  op.is_send = is_send;
  op.buf = buf.data_ptr();
  op.count = wire.count(t.numel());
  op.dtype = wire.dtype;
  op.peer = peer;
  op.tag = static_cast<uint32_t>(tag);
  if (owned) op.stream = current_stream_handle(t.device());

  std::lock_guard<std::recursive_mutex> lk(mu_);
  // uccl takes an any-source receive only on its own (it picks its peer when it runs).
  TORCH_CHECK_NOT_IMPLEMENTED(!(any_source && coalescing_), "uccl recv: a receive from any source cannot be part of "
                                                            "a batch_isend_irecv / coalescing block; pass the source rank");
  auto w = make_work(is_send ? c10d::OpType::SEND : (any_source ? c10d::OpType::RECVANYSOURCE : c10d::OpType::RECV),
                     name, {t}, c10d::kUnsetTimeout);
  if (any_source) w->set_any_source();
  if (owned) w->use_device(t.device());
  if (coalescing_) {
    // batch_isend_irecv: collected here, issued as one uccl p2p batch by endCoalescing().
    comm(name);  // fail now, not at the end of the block, if the group is closed
    co_p2p_.push_back(op);
    co_keep_.push_back(buf);
    if (copy_back) co_epilogues_.push_back(std::move(copy_back));
    co_p2p_works_.push_back(w);
    return w;
  }
  w->keep_alive(buf);
  if (copy_back) w->add_epilogue(std::move(copy_back));
  add_op(*w, comm(name).p2p({op}));
  return launch(w);
}

c10::intrusive_ptr<c10d::Work> UcclBackend::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  return p2p(tensors, dst, tag, true);
}

c10::intrusive_ptr<c10d::Work> UcclBackend::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  return p2p(tensors, src, tag, false);
}

// The first message sent to this rank by any member with this tag (gloo's recvAnysource);
// work.sourceRank() names the sender. uccl's executor picks the peer from each peer's next
// message header (Endpoint::peek), so a receive with a source keeps its per-peer matching.
c10::intrusive_ptr<c10d::Work> UcclBackend::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  return p2p(tensors, uccl::kAnySource, tag, false);
}

// ---------------------------------------------------------------------------------------------
// Coalescing

void UcclBackend::startCoalescing() {
  std::lock_guard<std::recursive_mutex> lk(mu_);
  TORCH_CHECK(!coalescing_, "uccl: startCoalescing() inside a coalescing block (blocks do not nest)");
  coalescing_ = true;
}

c10::intrusive_ptr<c10d::Work> UcclBackend::endCoalescing() {
  std::lock_guard<std::recursive_mutex> lk(mu_);
  TORCH_CHECK(coalescing_, "uccl: endCoalescing() without startCoalescing()");
  coalescing_ = false;
  auto p2p_ops = std::move(co_p2p_);
  auto keep = std::move(co_keep_);
  auto epilogues = std::move(co_epilogues_);
  auto p2p_works = std::move(co_p2p_works_);
  auto colls = std::move(co_colls_);
  co_p2p_.clear();
  co_keep_.clear();
  co_epilogues_.clear();
  co_p2p_works_.clear();
  co_colls_.clear();

  std::vector<at::Tensor> outputs;
  for (auto& w : p2p_works) {
    auto r = w->result();
    outputs.insert(outputs.end(), r.begin(), r.end());
  }
  auto end = make_work(c10d::OpType::COALESCED, "coalesced", std::move(outputs), c10d::kUnsetTimeout);
  for (auto& c : colls) end->add_dep(c);  // uccl completes in issue order; this adds their errors
  for (auto& t : keep) end->keep_alive(t);
  if (!estimator_)
    for (auto& fn : epilogues) end->add_epilogue(std::move(fn));
  for (auto& w : p2p_works)  // device tensors in the batch: `end` is ordered on their device's stream
    if (w->device()) end->use_device(*w->device());
  if (!p2p_ops.empty()) add_op(*end, comm("batch_isend_irecv").p2p(p2p_ops));
  end->start();
  // The works send()/recv() returned inside the block complete with the batch.
  for (auto& w : p2p_works) {
    w->add_dep(end);
    w->start();
  }
  return end;
}

// ---------------------------------------------------------------------------------------------
// Lifecycle

c10::intrusive_ptr<c10d::Backend> UcclBackend::split(const c10::intrusive_ptr<c10d::Store>& store,
                                                     const std::vector<int>& ranks,
                                                     const c10::intrusive_ptr<Options>& opts) {
  // torch calls this only on the members, each with its own group's ranks and a store prefixed
  // for that group, so a fresh communicator over that store is the split (uccl's split() would
  // need every parent rank to call it with one color each).
  auto it = std::find(ranks.begin(), ranks.end(), rank_);
  if (it == ranks.end()) return nullptr;
  std::string key = "split:" +
                    (opts && !opts->group_name.empty() ? opts->group_name : c10::str("store@", store.get())) + ":" +
                    c10::Join(",", ranks);
  const int new_rank = static_cast<int>(it - ranks.begin());
  return child_once(key, [&]() -> c10::intrusive_ptr<c10d::Backend> {
    return c10::make_intrusive<UcclBackend>(store, new_rank, static_cast<int>(ranks.size()), options_with(opts));
  });
}

c10::intrusive_ptr<c10d::Backend> UcclBackend::merge(const c10::intrusive_ptr<c10d::Store>& store,
                                                     const c10::intrusive_ptr<Options>& opts, const int& rank,
                                                     const int& size) {
  TORCH_CHECK_VALUE(size > 0 && rank >= 0 && rank < size, "uccl merge_remote_group: rank ", rank,
                    " (from the store's count of callers) is not below size ", size,
                    ": more processes called it on this store than the size they gave");
  std::string key = c10::str("merge:", opts ? opts->group_name : "", ":store@", store.get(), ":", rank, "/", size);
  return child_once(key, [&]() -> c10::intrusive_ptr<c10d::Backend> {
    c10::intrusive_ptr<c10d::Backend> b;
    // The rendezvous waits for the other processes: without the GIL (torch's binding keeps it).
    if (!run_without_gil([&] { b = c10::make_intrusive<UcclBackend>(store, rank, size, options_with(opts)); }))
      TORCH_CHECK(false, "uccl merge_remote_group: the interpreter is shutting down");
    return b;
  });
}

c10::intrusive_ptr<c10d::Backend> UcclBackend::child_once(
    const std::string& key, const std::function<c10::intrusive_ptr<c10d::Backend>()>& make) {
  std::lock_guard<std::recursive_mutex> lk(mu_);
  if (key == last_child_key_) {
    if (auto child = last_child_.lock()) return child;
  }
  c10::intrusive_ptr<c10d::Backend> child = make();
  last_child_key_ = key;
  last_child_ = c10::weak_intrusive_ptr<c10d::Backend>(child);
  return child;
}

c10::intrusive_ptr<c10d::Backend> UcclBackend::shrink(const std::vector<int64_t>& ranks_to_exclude, int shrink_flags,
                                                      const c10::intrusive_ptr<Options>& opts_override) {
  // SHRINK_DEFAULT (0) and SHRINK_ABORT (1) do the same here: uccl's shrink always aborts this
  // group's pending ops first (they fail with AbortedError: "shrink() called").
  TORCH_CHECK_VALUE(shrink_flags == 0 || shrink_flags == 1, "uccl shrink_group: unknown shrink_flags ", shrink_flags,
                    " (SHRINK_DEFAULT 0 or SHRINK_ABORT 1)");
  // Ranks out of range, twice or this rank's own: ValueError from the core's check.
  std::vector<int> exclude;
  for (int64_t r : ranks_to_exclude) exclude.push_back(static_cast<int>(std::clamp<int64_t>(r, -1, size_)));
  const uccl::CommOptions o = options_with(opts_override);
  std::shared_ptr<uccl::Communicator> c = live_comm("shrink_group");
  // The agreement waits on the other survivors (seconds when a rank died silently): without the
  // GIL, which uccl's threads may need meanwhile to drop tensors of the aborted ops.
  uccl::Result<std::shared_ptr<uccl::Communicator>> r = uccl::Status(uccl::Code::kInternal, "not run");
  if (!run_without_gil([&] { r = c->shrink_excluding(exclude, o); }))
    r = uccl::Status(uccl::Code::kAborted, "the interpreter is shutting down");
  // A failed shrink leaves this group aborted (its ops fail saying so) but able to shrink again:
  // a second call naming a rank the first one missed forms the group (shrink_excluding).
  if (!r.ok()) throw_status(r.status(), "shrink_group (rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ")");
  {
    std::lock_guard<std::recursive_mutex> lk(mu_);
    if (!closed_) {
      closed_ = true;
      closed_why_ = "shrunk (shrink_group formed a new group of the others)";
    }
  }
  std::shared_ptr<uccl::Communicator> shrunk = r.take();
  const int new_rank = shrunk->rank(), new_size = shrunk->size();
  return c10::make_intrusive<UcclBackend>(store_, new_rank, new_size, o, std::move(shrunk));
}

void UcclBackend::registerOnCompletionHook(std::function<void(std::shared_ptr<c10d::WorkInfo>)>&& hook) {
  std::lock_guard<std::mutex> lk(hook_->mu);
  TORCH_CHECK(!hook_->fn, "uccl: an on-completion hook is already registered for this group (one per group, as "
                          "with NCCL)");
  hook_->fn = std::move(hook);
  // What torch's ProcessGroup::hasHooks() reads (destroy_process_group then waits for pending
  // works): a marker only, the hook itself lives in hook_.
  onCompletionHook_ = [](std::shared_ptr<c10d::WorkInfo>) {};
}

void UcclBackend::start_time_estimate() {
  std::lock_guard<std::recursive_mutex> lk(mu_);
  TORCH_CHECK(!estimator_, "uccl: _start_time_estimate() twice without _end_time_estimate()");
  comm("_time_estimator");  // throws if this group was shut down or aborted
  estimator_ = std::make_shared<uccl::Estimator>(comm_);
  comm_ = estimator_;
}

double UcclBackend::end_time_estimate() {
  std::lock_guard<std::recursive_mutex> lk(mu_);
  TORCH_CHECK(estimator_, "uccl: _end_time_estimate() without _start_time_estimate()");
  if (comm_) comm_ = estimator_->real();  // (not after a shutdown inside the estimate)
  std::shared_ptr<uccl::Estimator> e = std::move(estimator_);
  estimator_.reset();
  const uccl::Status s = e->first_error();
  if (!s.ok()) {
    TORCH_WARN("uccl _time_estimator: ", s.message(), "; no estimate");
    return -1.0;
  }
  return e->seconds() * 1e6;
}

void UcclBackend::waitForPendingWorks() {
  // Hooks take the GIL: wait without it.
  run_without_gil([&] { hook_->wait_all_settled(); });
}

c10d::ErrorType UcclBackend::getError() {
  std::shared_ptr<uccl::Communicator> c;
  {
    std::lock_guard<std::recursive_mutex> lk(mu_);
    c = comm_;
  }
  if (!c) return c10d::ErrorType::SUCCESS;
  uccl::Status s = c->error();
  switch (s.code()) {
    case uccl::Code::kOk: return c10d::ErrorType::SUCCESS;
    case uccl::Code::kTimeout: return c10d::ErrorType::TIMEOUT;
    case uccl::Code::kRemoteError: return c10d::ErrorType::REMOTE_ERROR;
    default: return c10d::ErrorType::COMM_ERROR;
  }
}

void UcclBackend::abort() {
  std::shared_ptr<uccl::Communicator> c;
  {
    std::lock_guard<std::recursive_mutex> lk(mu_);
    if (!closed_) {
      closed_ = true;
      closed_why_ = "aborted";
    }
    c = comm_;
  }
  // Fails every pending op with kAborted; their futures settle with DistBackendError.
  if (c) c->abort("torch.distributed abort() on rank " + std::to_string(rank_));
}

void UcclBackend::shutdown() {
  std::shared_ptr<uccl::Communicator> c;
  {
    std::lock_guard<std::recursive_mutex> lk(mu_);
    if (!closed_) {
      closed_ = true;
      closed_why_ = "shut down";
    }
    c = std::move(comm_);
    comm_.reset();
  }
  // Settle what already completed, then let go of the communicator: uccl closes its
  // connections once the last reference (ours, or in-flight works') is gone.
  cq_->stop();
  // No hook runs after shutdown (a Python hook needs a live interpreter: torch tells users to
  // destroy their groups before exit for this reason).
  auto hook = std::make_unique<std::function<void(std::shared_ptr<c10d::WorkInfo>)>>();
  {
    std::lock_guard<std::mutex> lk(hook_->mu);
    hook->swap(hook_->fn);
  }
  onCompletionHook_ = nullptr;
  // Its destructor takes the GIL (torch's PythonOnCompletionHook): not while finalizing.
  if (!run_without_gil([&] { hook.reset(); })) (void)hook.release();
  // The engine joins its progress thread, which may be dropping a tensor's last reference
  // (needs the GIL): let go of the GIL meanwhile. At interpreter exit nothing gets the GIL again:
  // the communicator is then left alive (leaked on purpose) rather than joined into a hang.
  if (!run_without_gil([&] { c.reset(); })) new std::shared_ptr<uccl::Communicator>(std::move(c));
}

uccl::Status UcclBackend::last_error() {
  std::shared_ptr<uccl::Communicator> c;
  {
    std::lock_guard<std::recursive_mutex> lk(mu_);
    c = comm_;
  }
  return c ? c->error() : uccl::Status::Ok();
}

std::string UcclBackend::describe() {
  std::lock_guard<std::recursive_mutex> lk(mu_);
  return comm("describe").describe();
}

}  // namespace uccl_torch
