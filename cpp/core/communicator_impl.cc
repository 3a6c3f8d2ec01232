#include "core/communicator_impl.h"

#include "core/arg_checks.h"

#include <algorithm>
#include <numeric>

#include "algorithms/collectives.h"
#include "base/config.h"
#include "base/log.h"
#include "transports/path_choice.h"
#include "transports/registry.h"

namespace uccl {

namespace {

uintptr_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

// Whether [a, a + a_len) and [b, b + b_len) share a byte.
bool overlaps(uintptr_t a, size_t a_len, uintptr_t b, size_t b_len) { return a_len && b_len && a < b + b_len && b < a + a_len; }

bool p2p_overlap(const P2POp& a, const P2POp& b) {
  return overlaps(address(a.buf), a.count * dtype_size(a.dtype), address(b.buf), b.count * dtype_size(b.dtype));
}

// A collective's schedule reads the send buffer while it writes the receive buffer, so the two
// may share memory only as the collective's in-place arrangement has it: send at `in_place`
// (`how` says where in words). A 1 MiB all_reduce into its own send buffer shifted by one
// element came out wrong without a word; it is refused instead.
Status check_overlap(const char* what, const void* send, size_t send_bytes, const void* recv, size_t recv_bytes,
                     uintptr_t in_place, const char* how) {
  if (!send || !recv || address(send) == in_place || !overlaps(address(send), send_bytes, address(recv), recv_bytes))
    return Status::Ok();
  return InvalidArgument(std::string(what) + ": the send and receive buffers overlap without being in place (" + how + ")");
}

// Where the send buffer of an in-place call lies: `blocks` blocks of `count` elements of `dt`
// past (or, negative, before) the receive buffer.
uintptr_t in_place_at(const void* recv, ptrdiff_t blocks, size_t count, DataType dt) {
  return address(recv) + static_cast<uintptr_t>(blocks * static_cast<ptrdiff_t>(count * dtype_size(dt)));
}

constexpr size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Elements from a buffer's start to the end of its last block.
size_t extent(const Blocks& b) {
  size_t end = 0;
  for (size_t p = 0; p < b.cnt.size(); ++p)
    if (b.cnt[p]) end = std::max(end, b.off[p] + b.cnt[p]);
  return end;
}

}  // namespace

Result<std::shared_ptr<Communicator>> Communicator::create(int rank, int size, std::shared_ptr<Store> store,
                                                           const CommOptions& opts) {
  if (size < 1) return InvalidArgument("communicator size must be >= 1, got " + std::to_string(size));
  if (rank < 0 || rank >= size)
    return InvalidArgument("rank " + std::to_string(rank) + " out of range for size " + std::to_string(size));
  if (!store) return InvalidArgument("a store is required");
  UCCL_RETURN_IF_ERROR(config_status());  // a UCCL_* value that does not parse is refused here
  UCCL_RETURN_IF_ERROR(check_transport_names(!opts.transport.empty() ? opts.transport : kTransport.get()));
  auto algo = resolve_algorithm(opts.algorithm);
  if (!algo.ok()) return algo.status().with_context("option or UCCL_ALGO");
  log_set_rank(rank);
  const double timeout = opts.timeout_s > 0 ? opts.timeout_s : kTimeoutS.get();
  auto conns = std::make_unique<ConnectionManager>(rank, size, store, opts, timeout);
  Status s = conns->init();
  if (!s.ok()) return s.with_context("creating communicator (rank " + std::to_string(rank) + ")");
  const int agree_fd = conns->release_agreement_fd();
  auto engine = std::make_shared<Engine>(rank, size, std::move(conns), timeout);
  engine->start_progress_thread();
  UCCL_INFO("communicator %s: rank %d of %d ready", opts.name.c_str(), rank, size);
  auto impl = std::make_shared<CommunicatorImpl>(rank, size, store, opts, engine);
  if (agree_fd >= 0) impl->set_agreement(std::make_shared<AgreementPort>(agree_fd), nullptr);
  return std::shared_ptr<Communicator>(impl);
}

CommunicatorImpl::CommunicatorImpl(int rank, int size, std::shared_ptr<Store> store, const CommOptions& opts,
                                   std::shared_ptr<Engine> engine)
    : rank_(rank), size_(size), store_(std::move(store)), opts_(opts), engine_(std::move(engine)),
      algo_(resolve_algorithm(opts.algorithm).value()),
      small_msg_bytes_(kSmallMsgBytes.get()), express_on_(kExpress.get()) {
  exec_.p2p_sent.assign(size, 0);
  exec_.p2p_recvd.assign(size, 0);
}

CommunicatorImpl::~CommunicatorImpl() { engine_->shutdown(); }

Result<MemoryLoc> CommunicatorImpl::where(const char* what, std::initializer_list<const void*> bufs) {
  MemoryLoc loc;
  if (!any_device_memory()) return loc;  // host-only process: one check, no lookup
  bool first = true;
  for (const void* b : bufs) {
    if (!b) continue;
    MemoryLoc l = locate_memory(b);
    if (first) {
      loc = l;
      first = false;
    } else if (l.backend != loc.backend || l.ordinal != loc.ordinal) {
      auto name = [](const MemoryLoc& m) {
        return m.is_device() ? std::string(m.backend->name()) + " device " + std::to_string(m.ordinal) : std::string("host");
      };
      return InvalidArgument(std::string(what) + ": buffers in different places (" + name(loc) + " and " + name(l) +
                             "); all buffers of one call must be host memory or memory of one device");
    }
  }
  return loc;
}

Result<OpEnv> CommunicatorImpl::make_env(const Call& c, const MemoryLoc& mem, uintptr_t stream, OpStats* stats) {
  OpEnv env;
  if (mem.is_device()) {  // a bad stream is the caller's error, refused before anything is queued
    auto us = mem.backend->wrap_stream(mem.ordinal, stream);
    if (!us.ok()) return Status(Code::kInvalidArgument, std::string(collective_name(c.coll)) + ": stream: " + us.status().message());
    UCCL_RETURN_IF_ERROR(refuse_capture(mem.backend, us.value().get(), collective_name(c.coll)));
    // Ordered after the work queued on the user's stream *now*: the event is recorded here, in
    // the caller's thread. Recorded when the engine started the operation (as before), it came
    // after a wait_stream the caller queued meanwhile on the same stream, which waits for this
    // very operation: a deadlock until the timeout (the torch backend's wait() does exactly that).
    auto ev = mem.backend->create_event();
    if (!ev.ok()) return ev.status().with_context(collective_name(c.coll));
    UCCL_RETURN_IF_ERROR(mem.backend->record(ev.value().get(), us.value().get()));
    env.user_ready = std::shared_ptr<DeviceEvent>(ev.take());
  }
  env.mem = mem;
  env.stream = stream;
  env.rank = rank_;
  env.size = size_;
  env.envelope.coll = static_cast<uint8_t>(c.coll);
  env.envelope.count = c.count;
  env.envelope.dtype = static_cast<uint8_t>(c.dtype);
  env.envelope.redop = static_cast<uint8_t>(c.op);
  env.envelope.root = c.root;
  env.scratch = mem.is_device() ? &dev_scratch_ : &scratch_;
  env.choices = &choices_;
  env.stats = stats;
  env.algo = algo_;
  env.small_msg_bytes = small_msg_bytes_;
  // Collectives whose algorithm choice reads the topology need everyone's PeerInfo (first time only).
  if (size_ > 1 && needs_topology(c.coll) && probed_set_.load(std::memory_order_acquire)) {
    env.topo = probed_;  // every call after the first: no lock
  } else if (size_ > 1 && needs_topology(c.coll)) {
    auto t = probed_topology();
    if (!t.ok()) {
      // Collective, like a failed operation: the peers, which may have the topology and be
      // waiting for this rank's messages, learn the cause (abort notes) instead of a closed socket.
      Status why = t.status().with_context(collective_name(c.coll));
      engine_->abort(why);
      return why;
    }
    env.topo = t.value();
  }
  if (env.topo && !cpu_sharers_noted_) {
    cpu_sharers_noted_ = true;  // the waiting policy yields while spinning when they outnumber the cores
    note_cpu_sharers(cpu_sharers(*env.topo, rank_));
  }
  return env;
}

Result<WorkPtr> CommunicatorImpl::issue(const Call& c, ScheduleTask::Builder build, std::vector<P2POp>* p2p_ops,
                                        const MemoryLoc& mem, uintptr_t stream, Express* x) {
  if (x && express_new(c, build, mem, x)) return WorkPtr();
  auto w = std::make_shared<OpWork>(engine_, c.coll);
  w->mem = mem;
  auto made = make_env(c, mem, stream, &w->stats_);
  if (!made.ok()) return made.status();
  OpEnv& env = made.value();
  std::lock_guard<std::mutex> lock(issue_mu_);
  if (p2p_ops) {
    // Point-to-point messages are numbered per peer pair, not per communicator: the other
    // ranks never see them, so only the two ends can agree on a count. The executor numbers
    // them as it posts them (ExecState::p2p_sent/p2p_recvd), because an any-source receive
    // learns its peer only then.
    w->seq_ = 0;
    std::vector<std::pair<P2POp, Envelope>> plan;
    for (const P2POp& op : *p2p_ops) {
      Envelope env2;
      env2.coll = static_cast<uint8_t>(Collective::kSendRecv);
      env2.count = op.count;
      env2.dtype = static_cast<uint8_t>(op.dtype);
      env2.root = static_cast<int32_t>(op.tag);
      plan.emplace_back(op, env2);
    }
    build = [plan](const OpEnv& e, Schedule* s) {
      if (e.stats) e.stats->algorithm = "p2p";
      s->new_phase();
      // A send whose buffer overlaps a receive of the batch (MPI_Sendrecv_replace's case,
      // nccl-tests' in-place sendrecv) goes out from a copy taken before anything is posted:
      // the peer may still be reading the buffer (shm's CMA) while the receive overwrites it.
      // A receive whose buffer overlaps an earlier receive of the batch (PyTorch's pipelining
      // posts its warm-up receives from both neighbours into one tensor) lands in a copy that
      // is moved into place after every message arrived, in batch order: where receives
      // overlap, the later op's bytes win, whichever peer's message came first.
      std::vector<bool> staged(plan.size());
      size_t staged_bytes = 0;
      for (size_t i = 0; i < plan.size(); ++i) {
        const P2POp& op = plan[i].first;
        for (size_t j = 0; j < plan.size(); ++j) {
          const P2POp& other = plan[j].first;
          if (other.is_send || j == i || !p2p_overlap(op, other)) continue;
          if (op.is_send || j < i) staged[i] = true;
        }
        if (staged[i]) staged_bytes += round_up(op.count * dtype_size(op.dtype), 64);
      }
      char* copy = staged_bytes ? static_cast<char*>(e.scratch->get(staged_bytes)) : nullptr;
      if (staged_bytes && !copy) return e.scratch->error();
      std::vector<std::pair<P2POp, const char*>> land;  // staged receives, moved after the phase
      for (size_t i = 0; i < plan.size(); ++i) {
        P2POp op = plan[i].first;
        if (staged[i]) {
          const size_t bytes = op.count * dtype_size(op.dtype);
          if (op.is_send) s->copy(copy, op.buf, bytes);
          else land.emplace_back(op, copy);
          op.buf = copy;
          copy += round_up(bytes, 64);
        }
        s->p2p(op, plan[i].second);
      }
      if (!land.empty()) s->new_phase();
      for (auto& [op, from] : land) s->copy(op.buf, from, op.count * dtype_size(op.dtype));
      return Status::Ok();
    };
  } else {
    env.envelope.op_seq = ++coll_seq_;
    w->seq_ = coll_seq_;
  }
  w->task = std::make_unique<ScheduleTask>(env, engine_->conns(), &exec_, c.dtype, c.op, std::move(build));
  UCCL_TRACE("issue %s count %llu %s", w->label().c_str(), static_cast<unsigned long long>(c.count),
             dtype_name(c.dtype));
  Status s = engine_->submit(w);
  if (!s.ok()) return s;
  return WorkPtr(w);
}

// ---- argument checks: a bad call fails here, at once, and leaves the communicator usable ----

Status CommunicatorImpl::check_common(const char* what, DataType dt, size_t count, const void* send, const void* recv,
                                      bool need_recv) {
  UCCL_RETURN_IF_ERROR(check_dtype(what, dt));
  if (count > 0 && !send) return InvalidArgument(std::string(what) + ": send buffer is null but count is " + std::to_string(count));
  if (count > 0 && need_recv && !recv)
    return InvalidArgument(std::string(what) + ": receive buffer is null but count is " + std::to_string(count));
  if (engine_->has_failed()) return engine_->error();  // no lock (and no Status copy) per call otherwise
  return Status::Ok();
}

// ---- collectives ---------------------------------------------------------------------------

// Where the call's buffers live (CommunicatorImpl::where), or return its error.
#define UCCL_WHERE(var, what, ...)                      \
  auto var##_where = where(what, {__VA_ARGS__});        \
  if (!var##_where.ok()) return var##_where.status();   \
  const MemoryLoc var = var##_where.value()

Result<WorkPtr> CommunicatorImpl::all_reduce_impl(const AllReduceArgs& a, Express* x) {
  UCCL_RETURN_IF_ERROR(check_common("all_reduce", a.dtype, a.count, a.send, a.recv));
  UCCL_RETURN_IF_ERROR(check_op("all_reduce", a.dtype, a.op));
  UCCL_WHERE(mem, "all_reduce", a.send, a.recv);
  const Call c{Collective::kAllReduce, a.count, a.dtype, a.op, -1};
  if (x && express_cached(c, mem, x)) return WorkPtr();
  // (After the cache: a cached call has the same buffers and counts, checked when first made.)
  const size_t bytes = a.count * dtype_size(a.dtype);
  UCCL_RETURN_IF_ERROR(check_overlap("all_reduce", a.send, bytes, a.recv, bytes, address(a.recv), "recv == send"));
  return issue(c,
               [a](const OpEnv& e, Schedule* s) { return build_all_reduce(a, e, s); }, nullptr, mem, a.stream, x);
}

Result<WorkPtr> CommunicatorImpl::all_reduce(const AllReduceArgs& a) { return all_reduce_impl(a, nullptr); }

Result<WorkPtr> CommunicatorImpl::reduce_impl(const ReduceArgs& a, Express* x) {
  UCCL_RETURN_IF_ERROR(check_root("reduce", a.root, size_));
  UCCL_RETURN_IF_ERROR(check_common("reduce", a.dtype, a.count, a.send, a.recv, rank_ == a.root));
  UCCL_RETURN_IF_ERROR(check_op("reduce", a.dtype, a.op));
  UCCL_WHERE(mem, "reduce", a.send, a.recv);
  const Call c{Collective::kReduce, a.count, a.dtype, a.op, a.root};
  if (x && express_cached(c, mem, x)) return WorkPtr();
  const size_t bytes = a.count * dtype_size(a.dtype);
  if (rank_ == a.root)
    UCCL_RETURN_IF_ERROR(check_overlap("reduce", a.send, bytes, a.recv, bytes, address(a.recv), "recv == send"));
  return issue(c,
               [a](const OpEnv& e, Schedule* s) { return build_reduce(a, e, s); }, nullptr, mem, a.stream, x);
}

Result<WorkPtr> CommunicatorImpl::reduce(const ReduceArgs& a) { return reduce_impl(a, nullptr); }

Result<WorkPtr> CommunicatorImpl::broadcast_impl(const BroadcastArgs& a, Express* x) {
  UCCL_RETURN_IF_ERROR(check_root("broadcast", a.root, size_));
  const bool root = rank_ == a.root;
  UCCL_RETURN_IF_ERROR(check_common("broadcast", a.dtype, a.count, root ? a.send : a.recv, a.recv, !root));
  UCCL_WHERE(mem, "broadcast", root ? a.send : nullptr, a.recv);
  const Call c{Collective::kBroadcast, a.count, a.dtype, RedOp::kSum, a.root};
  if (x && express_cached(c, mem, x)) return WorkPtr();
  const size_t bytes = a.count * dtype_size(a.dtype);
  if (root)
    UCCL_RETURN_IF_ERROR(check_overlap("broadcast", a.send, bytes, a.recv, bytes, address(a.recv), "recv == send"));
  return issue(c,
               [a](const OpEnv& e, Schedule* s) { return build_broadcast(a, e, s); }, nullptr, mem, a.stream, x);
}

Result<WorkPtr> CommunicatorImpl::broadcast(const BroadcastArgs& a) { return broadcast_impl(a, nullptr); }

Result<WorkPtr> CommunicatorImpl::all_gather_impl(const AllGatherArgs& a, Express* x) {
  UCCL_RETURN_IF_ERROR(check_common("all_gather", a.dtype, a.count, a.send, a.recv));
  UCCL_WHERE(mem, "all_gather", a.send, a.recv);
  const Call c{Collective::kAllGather, a.count, a.dtype, RedOp::kSum, -1};
  if (x && express_cached(c, mem, x)) return WorkPtr();
  const size_t bytes = a.count * dtype_size(a.dtype);
  UCCL_RETURN_IF_ERROR(check_overlap("all_gather", a.send, bytes, a.recv, bytes * size_, in_place_at(a.recv, rank_, a.count, a.dtype),
                                     "send == recv + rank * count"));
  const Blocks b = even_blocks(a.count * size_, size_);
  return issue(c, [a, b](const OpEnv& e, Schedule* s) {
    return build_all_gather_v(a.send, a.recv, b, a.dtype, e, s);
  }, nullptr, mem, a.stream, x);
}

Result<WorkPtr> CommunicatorImpl::all_gather(const AllGatherArgs& a) { return all_gather_impl(a, nullptr); }

Result<WorkPtr> CommunicatorImpl::all_gather_v(const AllGatherVArgs& a) {
  if (a.recv_counts.size() != static_cast<size_t>(size_) ||
      (!a.recv_displs.empty() && a.recv_displs.size() != static_cast<size_t>(size_)))
    return InvalidArgument("all_gather_v: recv_counts/recv_displs need one entry per rank (" + std::to_string(size_) + ")");
  const Blocks b = blocks_from(a.recv_counts, a.recv_displs);
  UCCL_RETURN_IF_ERROR(check_common("all_gather_v", a.dtype, b.total(), a.send ? a.send : a.recv, a.recv));
  const size_t es = dtype_size(a.dtype);
  UCCL_RETURN_IF_ERROR(check_overlap("all_gather_v", a.send, b.cnt[rank_] * es, a.recv, extent(b) * es,
                                     in_place_at(a.recv, 1, b.off[rank_], a.dtype), "send == recv + recv_displs[rank]"));
  UCCL_WHERE(mem, "all_gather_v", a.send, a.recv);
  return issue({Collective::kAllGatherV, b.total(), a.dtype, RedOp::kSum, -1}, [a, b](const OpEnv& e, Schedule* s) {
    return build_all_gather_v(a.send, a.recv, b, a.dtype, e, s);
  }, nullptr, mem, a.stream);
}

Result<WorkPtr> CommunicatorImpl::reduce_scatter_impl(const ReduceScatterArgs& a, Express* x) {
  UCCL_RETURN_IF_ERROR(check_common("reduce_scatter", a.dtype, a.count, a.send, a.recv));
  UCCL_RETURN_IF_ERROR(check_op("reduce_scatter", a.dtype, a.op));
  UCCL_WHERE(mem, "reduce_scatter", a.send, a.recv);
  const Call c{Collective::kReduceScatter, a.count, a.dtype, a.op, -1};
  if (x && express_cached(c, mem, x)) return WorkPtr();
  const size_t bytes = a.count * dtype_size(a.dtype);
  UCCL_RETURN_IF_ERROR(check_overlap("reduce_scatter", a.send, bytes * size_, a.recv, bytes,
                                     in_place_at(a.recv, -rank_, a.count, a.dtype), "recv == send + rank * count"));
  const Blocks b = even_blocks(a.count * size_, size_);
  return issue(c, [a, b](const OpEnv& e, Schedule* s) {
    return build_reduce_scatter_v(a.send, a.recv, b, a, e, s);
  }, nullptr, mem, a.stream, x);
}

Result<WorkPtr> CommunicatorImpl::reduce_scatter(const ReduceScatterArgs& a) { return reduce_scatter_impl(a, nullptr); }

Result<WorkPtr> CommunicatorImpl::reduce_scatter_v(const ReduceScatterVArgs& a) {
  if (a.recv_counts.size() != static_cast<size_t>(size_))
    return InvalidArgument("reduce_scatter_v: recv_counts needs one entry per rank (" + std::to_string(size_) + ")");
  const Blocks b = blocks_from(a.recv_counts, {});
  UCCL_RETURN_IF_ERROR(check_common("reduce_scatter_v", a.dtype, b.total(), a.send, a.recv, a.recv_counts[rank_] > 0));
  const size_t es = dtype_size(a.dtype);
  UCCL_RETURN_IF_ERROR(check_overlap("reduce_scatter_v", a.send, b.total() * es, a.recv, b.cnt[rank_] * es,
                                     in_place_at(a.recv, -1, b.off[rank_], a.dtype), "recv == send + its block's offset"));
  UCCL_RETURN_IF_ERROR(check_op("reduce_scatter_v", a.dtype, a.op));
  ReduceScatterArgs base;
  base.dtype = a.dtype;
  base.op = a.op;
  base.scalar = a.scalar;
  UCCL_WHERE(mem, "reduce_scatter_v", a.send, a.recv);
  return issue({Collective::kReduceScatterV, b.total(), a.dtype, a.op, -1},
               [a, b, base](const OpEnv& e, Schedule* s) { return build_reduce_scatter_v(a.send, a.recv, b, base, e, s); },
               nullptr, mem, a.stream);
}

Result<WorkPtr> CommunicatorImpl::all_to_all(const AllToAllArgs& a) {
  AllToAllVArgs v;
  v.send = a.send;
  v.recv = a.recv;
  v.dtype = a.dtype;
  for (int p = 0; p < size_; ++p) {
    v.send_counts.push_back(a.count);
    v.recv_counts.push_back(a.count);
    v.send_displs.push_back(p * a.count);
    v.recv_displs.push_back(p * a.count);
  }
  UCCL_RETURN_IF_ERROR(check_common("all_to_all", a.dtype, a.count, a.send, a.recv));
  const size_t bytes = a.count * dtype_size(a.dtype) * size_;
  UCCL_RETURN_IF_ERROR(check_overlap("all_to_all", a.send, bytes, a.recv, bytes, address(a.recv), "recv == send"));
  UCCL_WHERE(mem, "all_to_all", a.send, a.recv);
  return issue({Collective::kAllToAll, a.count, a.dtype, RedOp::kSum, -1},
               [v](const OpEnv& e, Schedule* s) { return build_all_to_all_v(v, e, s); }, nullptr, mem, a.stream);
}

Result<WorkPtr> CommunicatorImpl::all_to_all_v(const AllToAllVArgs& a) {
  const size_t n = size_;
  if (a.send_counts.size() != n || a.recv_counts.size() != n || a.send_displs.size() != n || a.recv_displs.size() != n)
    return InvalidArgument("all_to_all_v: send/recv counts and displacements need one entry per rank (" +
                           std::to_string(n) + ")");
  if (a.send_counts[rank_] != a.recv_counts[rank_])
    return InvalidArgument("all_to_all_v: rank " + std::to_string(rank_) + " sends " +
                           std::to_string(a.send_counts[rank_]) + " elements to itself but expects " +
                           std::to_string(a.recv_counts[rank_]));
  const size_t total_send = std::accumulate(a.send_counts.begin(), a.send_counts.end(), size_t(0));
  const size_t total_recv = std::accumulate(a.recv_counts.begin(), a.recv_counts.end(), size_t(0));
  UCCL_RETURN_IF_ERROR(check_common("all_to_all_v", a.dtype, total_send, a.send, a.recv, total_recv > 0));
  const size_t es = dtype_size(a.dtype);
  const bool same_layout = a.send_counts == a.recv_counts && a.send_displs == a.recv_displs;
  UCCL_RETURN_IF_ERROR(check_overlap("all_to_all_v", a.send, extent(blocks_from(a.send_counts, a.send_displs)) * es, a.recv,
                                     extent(blocks_from(a.recv_counts, a.recv_displs)) * es,
                                     same_layout ? address(a.recv) : 0, "recv == send with the same counts and displacements"));
  UCCL_WHERE(mem, "all_to_all_v", a.send, a.recv);
  return issue({Collective::kAllToAllV, 0, a.dtype, RedOp::kSum, -1},
               [a](const OpEnv& e, Schedule* s) { return build_all_to_all_v(a, e, s); }, nullptr, mem, a.stream);
}

Result<WorkPtr> CommunicatorImpl::gather(const GatherArgs& a) {
  UCCL_RETURN_IF_ERROR(check_root("gather", a.root, size_));
  UCCL_RETURN_IF_ERROR(check_common("gather", a.dtype, a.count, a.send, a.recv, rank_ == a.root));
  const size_t bytes = a.count * dtype_size(a.dtype);
  if (rank_ == a.root)
    UCCL_RETURN_IF_ERROR(check_overlap("gather", a.send, bytes, a.recv, bytes * size_, in_place_at(a.recv, a.root, a.count, a.dtype),
                                       "send == recv + root * count"));
  UCCL_WHERE(mem, "gather", a.send, rank_ == a.root ? a.recv : nullptr);
  return issue({Collective::kGather, a.count, a.dtype, RedOp::kSum, a.root},
               [a](const OpEnv& e, Schedule* s) { return build_gather(a, e, s); }, nullptr, mem, a.stream);
}

Result<WorkPtr> CommunicatorImpl::scatter(const ScatterArgs& a) {
  UCCL_RETURN_IF_ERROR(check_root("scatter", a.root, size_));
  UCCL_RETURN_IF_ERROR(check_common("scatter", a.dtype, a.count, rank_ == a.root ? a.send : a.recv, a.recv));
  const size_t bytes = a.count * dtype_size(a.dtype);
  if (rank_ == a.root)
    UCCL_RETURN_IF_ERROR(check_overlap("scatter", a.send, bytes * size_, a.recv, bytes, in_place_at(a.recv, -a.root, a.count, a.dtype),
                                       "recv == send + root * count"));
  UCCL_WHERE(mem, "scatter", rank_ == a.root ? a.send : nullptr, a.recv);
  return issue({Collective::kScatter, a.count, a.dtype, RedOp::kSum, a.root},
               [a](const OpEnv& e, Schedule* s) { return build_scatter(a, e, s); }, nullptr, mem, a.stream);
}

Result<WorkPtr> CommunicatorImpl::p2p(const std::vector<P2POp>& ops) {
  for (const P2POp& op : ops) {
    if (op.peer == kAnySource && !op.is_send) {
      if (ops.size() != 1)
        return InvalidArgument("recv from any source: it must be alone in its p2p batch (got " +
                               std::to_string(ops.size()) + " ops)");
      if (size_ == 1) return InvalidArgument("recv from any source: the communicator has no other rank");
      UCCL_RETURN_IF_ERROR(check_common("recv", op.dtype, op.count, op.buf, op.buf));
      continue;
    }
    if (op.peer < 0 || op.peer >= size_)
      return InvalidArgument(std::string(op.is_send ? "send" : "recv") + ": peer " + std::to_string(op.peer) +
                             " out of range for " + std::to_string(size_) + " ranks");
    UCCL_RETURN_IF_ERROR(check_common(op.is_send ? "send" : "recv", op.dtype, op.count, op.buf, op.buf));
  }
  std::vector<P2POp> copy = ops;
  MemoryLoc mem;
  uintptr_t stream = 0;
  if (any_device_memory()) {
    for (size_t i = 0; i < ops.size(); ++i) {
      UCCL_WHERE(m, "p2p", ops[0].buf, ops[i].buf);
      if (m.is_device()) mem = m;
      if (ops[i].stream) stream = ops[i].stream;
    }
  }
  return issue({Collective::kSendRecv, 0, DataType::kUint8, RedOp::kSum, -1}, nullptr, &copy, mem, stream);
}

Result<WorkPtr> CommunicatorImpl::barrier() {
  UCCL_RETURN_IF_ERROR(engine_->error());
  return issue({Collective::kBarrier, 0, DataType::kUint8, RedOp::kSum, -1},
               [](const OpEnv& e, Schedule* s) { return build_barrier(e, s); });
}

std::shared_ptr<void> CommunicatorImpl::will_wait() {
  engine_->begin_will_wait();
  // The token holds the engine, so it may outlive the communicator harmlessly.
  std::shared_ptr<Engine> e = engine_;
  return std::shared_ptr<void>(e.get(), [e](void*) { e->end_will_wait(); });
}

void CommunicatorImpl::abort(const std::string& why) { engine_->abort(Status(Code::kAborted, why)); }

Status CommunicatorImpl::error() { return engine_->error(); }

}  // namespace uccl
