// _core.perf_loop: the timed loop of uccl-perf, in C++.
//
// Why in C++: a Python loop costs a few microseconds per iteration (argument conversion, GIL
// hand-off, the Work object), which is more than an 8-byte all_reduce over shared memory takes.
// nccl-tests times a C loop; so does this. The Python driver (uccl/perf) only prepares buffers,
// checks results and prints.
//
// Shape of one call (like nccl-tests' BenchTime): `warmup` untimed operations, a barrier so
// every rank starts the clock together, then `iters` operations back to back: issued all at
// once and waited for at the end (operations complete in issue order), or with blocking=True
// each one waited for before the next is issued (nccl-tests -z 1). Returns elapsed seconds of
// the timed part on this rank; the caller averages over iterations and ranks (-a).
#include "python/core/perf_loop.h"

#include <pybind11/stl.h>

#include <chrono>
#include <string>
#include <vector>

#include "uccl/communicator.h"
#include "python/core/py_errors.h"

namespace py = pybind11;

namespace uccl {
namespace {

void check(const Status& s) {
  if (!s.ok()) throw_status(s);
}

// One operation of the benchmark, bound to its buffers once so the loop does no parsing.
struct PerfOp {
  std::string coll;
  void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  RedOp op = RedOp::kSum;
  double scalar = 1.0;
  int root = 0;
};

Result<WorkPtr> issue(Communicator& c, const PerfOp& p) {
  const std::string& k = p.coll;
  if (k == "all_reduce") return c.all_reduce({p.send, p.recv, p.count, p.dtype, p.op, p.scalar});
  if (k == "all_gather") return c.all_gather({p.send, p.recv, p.count, p.dtype});
  if (k == "reduce_scatter") return c.reduce_scatter({p.send, p.recv, p.count, p.dtype, p.op, p.scalar});
  if (k == "broadcast") return c.broadcast({p.send, p.recv, p.count, p.dtype, p.root});
  if (k == "alltoall") return c.all_to_all({p.send, p.recv, p.count, p.dtype});
  if (k == "gather") return c.gather({p.send, p.recv, p.count, p.dtype, p.root});
  if (k == "scatter") return c.scatter({p.send, p.recv, p.count, p.dtype, p.root});
  if (k == "reduce") {
    ReduceArgs a;
    a.send = p.send;
    a.recv = p.recv;
    a.count = p.count;
    a.dtype = p.dtype;
    a.op = p.op;
    a.scalar = p.scalar;
    a.root = p.root;
    return c.reduce(a);
  }
  if (k == "sendrecv") {
    // nccl-tests' sendrecv: every rank sends to the next and receives from the previous.
    const int n = c.size(), r = c.rank();
    std::vector<P2POp> ops = {{true, p.send, p.count, p.dtype, (r + 1) % n, 0},
                              {false, p.recv, p.count, p.dtype, (r - 1 + n) % n, 0}};
    return c.p2p(ops);
  }
  return InvalidArgument("perf_loop: unknown collective '" + k + "'");
}

// The blocking form (Communicator::run, the express path) of the collectives that have one;
// `issued` false for the others.
Status run_blocking(Communicator& c, const PerfOp& p, double timeout_s, bool* issued) {
  const std::string& k = p.coll;
  *issued = true;
  if (k == "all_reduce") return c.run(AllReduceArgs{p.send, p.recv, p.count, p.dtype, p.op, p.scalar}, timeout_s);
  if (k == "all_gather") return c.run(AllGatherArgs{p.send, p.recv, p.count, p.dtype}, timeout_s);
  if (k == "reduce_scatter") return c.run(ReduceScatterArgs{p.send, p.recv, p.count, p.dtype, p.op, p.scalar}, timeout_s);
  if (k == "broadcast") return c.run(BroadcastArgs{p.send, p.recv, p.count, p.dtype, p.root}, timeout_s);
  *issued = false;
  return Status::Ok();
}

Status run(Communicator& c, const PerfOp& p, int n, bool blocking, double timeout_s) {
  if (n <= 0) return Status::Ok();
  // Blocking: one operation in flight. Otherwise all of them are queued before the first
  // wait; the last Work is waited for first (they complete in order), then every status is read.
  std::vector<WorkPtr> works;
  works.reserve(blocking ? 1 : n);
  for (int i = 0; i < n; ++i) {
    if (blocking) {
      bool issued = false;
      Status s = run_blocking(c, p, timeout_s, &issued);
      if (issued) {
        UCCL_RETURN_IF_ERROR(s);
        continue;
      }
    }
    auto w = issue(c, p);
    if (!w.ok()) return w.status();
    if (blocking) {
      UCCL_RETURN_IF_ERROR(w.value()->wait(timeout_s));
    } else {
      works.push_back(w.take());
    }
  }
  if (!works.empty()) UCCL_RETURN_IF_ERROR(works.back()->wait(timeout_s));
  for (auto& w : works) UCCL_RETURN_IF_ERROR(w->wait(timeout_s));
  return Status::Ok();
}

double perf_loop(Communicator& c, const PerfOp& p, int warmup, int iters, bool blocking, double timeout_s,
                 bool barrier) {
  // This thread waits for everything it issues: the background progress thread stays asleep
  // (see Communicator::will_wait), as it would for any caller that issues and then waits.
  std::shared_ptr<void> waiting = c.will_wait();
  check(run(c, p, warmup, blocking, timeout_s));
  if (barrier) {
    auto b = c.barrier();
    check(b.status());
    check(b.value()->wait(timeout_s));
  }
  const auto t0 = std::chrono::steady_clock::now();
  check(run(c, p, iters, blocking, timeout_s));
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(t1 - t0).count();
}

}  // namespace

void register_perf_loop(py::module_& m) {
  m.def(
      "perf_loop",
      [](Communicator& c, const std::string& coll, uintptr_t send, uintptr_t recv, size_t count, int dtype, int op,
         double scalar, int root, int warmup, int iters, bool blocking, double timeout, bool barrier) {
        PerfOp p;
        p.coll = coll;
        p.send = reinterpret_cast<void*>(send);
        p.recv = reinterpret_cast<void*>(recv);
        p.count = count;
        p.dtype = static_cast<DataType>(dtype);
        p.op = static_cast<RedOp>(op);
        p.scalar = scalar;
        p.root = root;
        py::gil_scoped_release nogil;  // the progress thread may need the GIL (Python stores)
        return perf_loop(c, p, warmup, iters, blocking, timeout, barrier);
      },
      py::arg("comm"), py::arg("collective"), py::arg("send"), py::arg("recv"), py::arg("count"),
      py::arg("dtype"), py::arg("op") = 0, py::arg("scalar") = 1.0, py::arg("root") = 0, py::arg("warmup") = 0,
      py::arg("iters") = 1, py::arg("blocking") = false, py::arg("timeout") = -1.0, py::arg("barrier") = true,
      "Runs warmup + iters operations of one collective back to back in C++; returns the seconds "
      "the timed iterations took on this rank (after a barrier when barrier=True).");
}

}  // namespace uccl
