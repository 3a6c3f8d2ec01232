// The C API, part 2: collectives and point-to-point operations. Each call checks the C-level
// arguments (handles, enum ranges, count arrays), builds the C++ Args, issues it, and then
// either hands back a request or waits (request == NULL). Size, root and buffer checks are the
// Communicator's own (one place), so C and Python callers get the same errors.
#include <vector>

#include "capi/capi_internal.h"

using uccl::capi::guard;
using uccl::capi::invalid;
using uccl::capi::record;

namespace {

bool bad_dtype(uccl_datatype_t d) { return static_cast<int>(d) < 0 || static_cast<int>(d) >= uccl::kNumDataTypes; }
bool bad_op(uccl_red_op_t op) {
  return static_cast<int>(op) < 0 || static_cast<int>(op) >= uccl::kNumRedOps ||
         static_cast<int>(op) == static_cast<int>(uccl::RedOp::kPremulSum);  // needs a scalar: not in the C API
}

uccl::DataType dt(uccl_datatype_t d) { return static_cast<uccl::DataType>(d); }
uccl::RedOp rop(uccl_red_op_t op) { return static_cast<uccl::RedOp>(op); }

// Checks the handle and the enums every operation shares; returns UCCL_SUCCESS or the error.
uccl_result_t check(const char* fn, uccl_comm_t comm, uccl_datatype_t d, const uccl_red_op_t* op = nullptr) {
  if (!comm) return invalid(fn, "comm is NULL");
  if (bad_dtype(d)) return invalid(fn, "datatype " + std::to_string(static_cast<int>(d)) + " is not a uccl_datatype_t");
  if (op && bad_op(*op)) return invalid(fn, "op " + std::to_string(static_cast<int>(*op)) + " is not a uccl_red_op_t");
  return UCCL_SUCCESS;
}

// Issues through `issue` (a callable returning Result<WorkPtr>) and completes per `request`.
template <class Issue>
uccl_result_t finish(const char* fn, uccl_comm_t comm, uccl_request_t* request, Issue&& issue) {
  std::shared_ptr<void> token = request ? nullptr : comm->c->will_wait();
  if (request) *request = nullptr;
  auto w = issue();
  if (!w.ok()) return record(w.status());
  if (request) {
    *request = new uccl_request{w.take()};
    return UCCL_SUCCESS;
  }
  return record(w.value()->wait(-1));
}

// The collectives with a blocking form (Communicator::run, the express path): that form when
// request is NULL, else issued through `issue` and handed back.
template <class Args>
uccl_result_t finish_args(const char* fn, uccl_comm_t comm, uccl_request_t* request, const Args& a,
                          uccl::Result<uccl::WorkPtr> (uccl::Communicator::*issue)(const Args&)) {
  if (!request) return record(comm->c->run(a));
  return finish(fn, comm, request, [&] { return ((*comm->c).*issue)(a); });
}

// counts[0..n) as a vector; NULL gives an empty vector (meaning "packed" for displacements).
std::vector<size_t> vec(const size_t* a, int n) { return a ? std::vector<size_t>(a, a + n) : std::vector<size_t>(); }

// Displacements, or the packed ones (running sum of counts) when displs is NULL.
std::vector<size_t> displs_or_packed(const size_t* displs, const std::vector<size_t>& counts) {
  if (displs) return std::vector<size_t>(displs, displs + counts.size());
  std::vector<size_t> d(counts.size());
  for (size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
  return d;
}

}  // namespace

#define UCCL_CHECK(...)                                         \
  do {                                                          \
    uccl_result_t _r = check(fn, __VA_ARGS__);            \
    if (_r != UCCL_SUCCESS) return _r;                          \
  } while (0)

extern "C" {

uccl_result_t uccl_all_reduce(const void* send, void* recv, size_t count, uccl_datatype_t datatype,
                              uccl_red_op_t op, uccl_comm_t comm, uccl_request_t* request) {
  const char* fn = __func__;
  return guard(fn, [&] {
    UCCL_CHECK(comm, datatype, &op);
    uccl::AllReduceArgs a;
    a.send = send, a.recv = recv, a.count = count, a.dtype = dt(datatype), a.op = rop(op);
    return finish_args(fn, comm, request, a, &uccl::Communicator::all_reduce);
  });
}

uccl_result_t uccl_reduce(const void* send, void* recv, size_t count, uccl_datatype_t datatype, uccl_red_op_t op,
                          int root, uccl_comm_t comm, uccl_request_t* request) {
  const char* fn = __func__;
  return guard(fn, [&] {
    UCCL_CHECK(comm, datatype, &op);
    uccl::ReduceArgs a;
    a.send = send, a.recv = recv, a.count = count, a.dtype = dt(datatype), a.op = rop(op), a.root = root;
    return finish_args(fn, comm, request, a, &uccl::Communicator::reduce);
  });
}

uccl_result_t uccl_broadcast(const void* send, void* recv, size_t count, uccl_datatype_t datatype, int root,
                             uccl_comm_t comm, uccl_request_t* request) {
  const char* fn = __func__;
  return guard(fn, [&] {
    UCCL_CHECK(comm, datatype);
    uccl::BroadcastArgs a;
    a.send = send, a.recv = recv, a.count = count, a.dtype = dt(datatype), a.root = root;
    return finish_args(fn, comm, request, a, &uccl::Communicator::broadcast);
  });
}

uccl_result_t uccl_all_gather(const void* send, void* recv, size_t count, uccl_datatype_t datatype,
                              uccl_comm_t comm, uccl_request_t* request) {
  const char* fn = __func__;
  return guard(fn, [&] {
    UCCL_CHECK(comm, datatype);
    uccl::AllGatherArgs a;
    a.send = send, a.recv = recv, a.count = count, a.dtype = dt(datatype);
    return finish_args(fn, comm, request, a, &uccl::Communicator::all_gather);
  });
}

uccl_result_t uccl_all_gather_v(const void* send, void* recv, const size_t* recv_counts, const size_t* recv_displs,
                                uccl_datatype_t datatype, uccl_comm_t comm, uccl_request_t* request) {
  const char* fn = __func__;
  return guard(fn, [&] {
    UCCL_CHECK(comm, datatype);
    if (!recv_counts) return invalid(fn, "recv_counts is NULL");
    uccl::AllGatherVArgs a;
    int n = comm->c->size();
    a.send = send, a.recv = recv, a.recv_counts = vec(recv_counts, n), a.recv_displs = vec(recv_displs, n);
    a.dtype = dt(datatype);
    return finish(fn, comm, request, [&] { return comm->c->all_gather_v(a); });
  });
}

uccl_result_t uccl_reduce_scatter(const void* send, void* recv, size_t recv_count, uccl_datatype_t datatype,
                                  uccl_red_op_t op, uccl_comm_t comm, uccl_request_t* request) {
  const char* fn = __func__;
  return guard(fn, [&] {
    UCCL_CHECK(comm, datatype, &op);
    uccl::ReduceScatterArgs a;
    a.send = send, a.recv = recv, a.count = recv_count, a.dtype = dt(datatype), a.op = rop(op);
    return finish_args(fn, comm, request, a, &uccl::Communicator::reduce_scatter);
  });
}

uccl_result_t uccl_reduce_scatter_v(const void* send, void* recv, const size_t* recv_counts,
                                    uccl_datatype_t datatype, uccl_red_op_t op, uccl_comm_t comm,
                                    uccl_request_t* request) {
  const char* fn = __func__;
  return guard(fn, [&] {
    UCCL_CHECK(comm, datatype, &op);
    if (!recv_counts) return invalid(fn, "recv_counts is NULL");
    uccl::ReduceScatterVArgs a;
    a.send = send, a.recv = recv, a.recv_counts = vec(recv_counts, comm->c->size());
    a.dtype = dt(datatype), a.op = rop(op);
    return finish(fn, comm, request, [&] { return comm->c->reduce_scatter_v(a); });
  });
}

uccl_result_t uccl_all_to_all(const void* send, void* recv, size_t count, uccl_datatype_t datatype,
                              uccl_comm_t comm, uccl_request_t* request) {
  const char* fn = __func__;
  return guard(fn, [&] {
    UCCL_CHECK(comm, datatype);
    uccl::AllToAllArgs a;
    a.send = send, a.recv = recv, a.count = count, a.dtype = dt(datatype);
    return finish(fn, comm, request, [&] { return comm->c->all_to_all(a); });
  });
}

uccl_result_t uccl_all_to_all_v(const void* send, const size_t* send_counts, const size_t* send_displs, void* recv,
                                const size_t* recv_counts, const size_t* recv_displs, uccl_datatype_t datatype,
                                uccl_comm_t comm, uccl_request_t* request) {
  const char* fn = __func__;
  return guard(fn, [&] {
    UCCL_CHECK(comm, datatype);
    if (!send_counts || !recv_counts) return invalid(fn, "send_counts or recv_counts is NULL");
    int n = comm->c->size();
    uccl::AllToAllVArgs a;
    a.send = send, a.recv = recv, a.dtype = dt(datatype);
    a.send_counts = vec(send_counts, n), a.recv_counts = vec(recv_counts, n);
    a.send_displs = displs_or_packed(send_displs, a.send_counts);
    a.recv_displs = displs_or_packed(recv_displs, a.recv_counts);
    return finish(fn, comm, request, [&] { return comm->c->all_to_all_v(a); });
  });
}

uccl_result_t uccl_gather(const void* send, void* recv, size_t count, uccl_datatype_t datatype, int root,
                          uccl_comm_t comm, uccl_request_t* request) {
  const char* fn = __func__;
  return guard(fn, [&] {
    UCCL_CHECK(comm, datatype);
    uccl::GatherArgs a;
    a.send = send, a.recv = recv, a.count = count, a.dtype = dt(datatype), a.root = root;
    return finish(fn, comm, request, [&] { return comm->c->gather(a); });
  });
}

uccl_result_t uccl_scatter(const void* send, void* recv, size_t count, uccl_datatype_t datatype, int root,
                           uccl_comm_t comm, uccl_request_t* request) {
  const char* fn = __func__;
  return guard(fn, [&] {
    UCCL_CHECK(comm, datatype);
    uccl::ScatterArgs a;
    a.send = send, a.recv = recv, a.count = count, a.dtype = dt(datatype), a.root = root;
    return finish(fn, comm, request, [&] { return comm->c->scatter(a); });
  });
}

uccl_result_t uccl_barrier(uccl_comm_t comm, uccl_request_t* request) {
  const char* fn = __func__;
  return guard(fn, [&] {
    UCCL_CHECK(comm, uccl_uint8);
    return finish(fn, comm, request, [&] { return comm->c->barrier(); });
  });
}

uccl_result_t uccl_monitored_barrier(uccl_comm_t comm, double timeout_s, int wait_all_ranks) {
  const char* fn = __func__;
  return guard(fn, [&] {
    UCCL_CHECK(comm, uccl_uint8);
    const uccl::Status s = comm->c->monitored_barrier(timeout_s, wait_all_ranks != 0);
    return s.ok() ? UCCL_SUCCESS : record(s.with_context(fn));
  });
}

uccl_result_t uccl_estimate(uccl_comm_t comm, const char* collective, size_t nbytes, int root, double* seconds) {
  const char* fn = __func__;
  return guard(fn, [&] {
    UCCL_CHECK(comm, uccl_uint8);
    if (!collective || !seconds) return invalid(fn, "collective or seconds is NULL");
    auto coll = uccl::parse_collective(collective);
    if (!coll.ok()) return record(coll.status().with_context(fn));
    auto t = comm->c->estimate(coll.value(), nbytes, root);
    if (!t.ok()) return record(t.status().with_context(fn));
    *seconds = t.value();
    return UCCL_SUCCESS;
  });
}

uccl_result_t uccl_p2p(const uccl_p2p_op_t* ops, int n, uccl_comm_t comm, uccl_request_t* request) {
  const char* fn = __func__;
  return guard(fn, [&] {
    UCCL_CHECK(comm, uccl_uint8);
    if (n < 0 || (n > 0 && !ops)) return invalid(fn, "ops is NULL or n is negative");
    std::vector<uccl::P2POp> plan(n);
    for (int i = 0; i < n; ++i) {
      if (bad_dtype(ops[i].datatype)) return invalid(fn, "op " + std::to_string(i) + ": bad datatype");
      // The C API has no any-source receive (uccl::kAnySource): a negative peer is a bad rank.
      if (ops[i].peer < 0)
        return invalid(fn, "op " + std::to_string(i) + ": peer " + std::to_string(ops[i].peer) + " out of range");
      plan[i].is_send = ops[i].is_send != 0, plan[i].buf = ops[i].buf, plan[i].count = ops[i].count;
      plan[i].dtype = dt(ops[i].datatype), plan[i].peer = ops[i].peer, plan[i].tag = ops[i].tag;
    }
    return finish(fn, comm, request, [&] { return comm->c->p2p(plan); });
  });
}

uccl_result_t uccl_send(const void* buf, size_t count, uccl_datatype_t datatype, int peer, uccl_comm_t comm,
                        uccl_request_t* request) {
  uccl_p2p_op_t op = {1, const_cast<void*>(buf), count, datatype, peer, 0};
  return uccl_p2p(&op, 1, comm, request);
}

uccl_result_t uccl_recv(void* buf, size_t count, uccl_datatype_t datatype, int peer, uccl_comm_t comm,
                        uccl_request_t* request) {
  uccl_p2p_op_t op = {0, buf, count, datatype, peer, 0};
  return uccl_p2p(&op, 1, comm, request);
}

}  // extern "C"
