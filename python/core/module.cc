// uccl._core: the Python bindings of the C++ core (no torch needed).
//
// The bindings stay thin: they take raw addresses, element counts and enum values. The Python
// layer (uccl/comm.py) turns numpy arrays, buffer-protocol objects, DLPack capsules and torch
// tensors into those, validates them, and keeps the buffers alive until the Work completes.
//
// GIL rule: every call that may take the engine lock releases the GIL first. The progress
// thread can need the GIL (a Python store, a torch future callback); holding it while
// waiting for the engine lock would deadlock.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "uccl/tcp_store.h"
#include "base/device.h"
#include "build_info.h"
#include "uccl/communicator.h"
#include "uccl/estimator.h"
#include "base/config.h"
#include "base/net.h"
#include "python/core/blocking_call.h"
#include "python/core/cost_bindings.h"
#include "python/core/device_bindings.h"
#include "python/core/perf_loop.h"
#include "python/core/py_errors.h"
#include "python/core/py_store.h"
#include "transports/registry.h"
#include "transports/tcp/tcp_tls.h"
#include "bootstrap/auth.h"

namespace py = pybind11;
using namespace uccl;

namespace {

template <class T>
T unwrap(Result<T> r) {
  if (!r.ok()) throw_status(r.status());
  return r.take();
}
void check(const Status& s) {
  if (!s.ok()) throw_status(s);
}

CommOptions options_from(const py::dict& d) {
  CommOptions o;
  if (d.contains("timeout")) o.timeout_s = d["timeout"].cast<double>();
  if (d.contains("transport")) o.transport = d["transport"].cast<std::string>();
  if (d.contains("algorithm")) o.algorithm = d["algorithm"].cast<std::string>();
  if (d.contains("socket_ifname")) o.socket_ifname = d["socket_ifname"].cast<std::string>();
  if (d.contains("name")) o.name = d["name"].cast<std::string>();
  return o;
}

void* ptr(uintptr_t p) { return reinterpret_cast<void*>(p); }
DataType dt(int v) { return static_cast<DataType>(v); }
RedOp rop(int v) { return static_cast<RedOp>(v); }

py::dict stats_dict(const OpStats& s) {
  py::dict d, sent, recvd;
  for (const TransportEntry* e : transport_table()) {
    const int k = static_cast<int>(e->id);
    sent[e->name.c_str()] = s.bytes_sent_by_transport[k];
    recvd[e->name.c_str()] = s.bytes_received_by_transport[k];
  }
  d["bytes_sent"] = sent;
  d["bytes_received"] = recvd;
  // By topology level of the peer ("host", "cluster", "inter_cluster"): where the bytes went.
  py::dict lsent, lrecvd;
  const char* levels[3] = {"host", "cluster", "inter_cluster"};
  for (int l = 0; l < 3; ++l) {
    lsent[levels[l]] = s.bytes_sent_by_level[l];
    lrecvd[levels[l]] = s.bytes_received_by_level[l];
  }
  d["bytes_sent_by_level"] = lsent;
  d["bytes_received_by_level"] = lrecvd;
  d["algorithm"] = s.algorithm;
  d["phases_ahead"] = s.phases_ahead;
  return d;
}

// A communicator handed to Python. Its last reference may be Python's, dropped with the GIL
// held (a `del`, a function's locals); the destructor joins the progress thread, which may be
// waiting for the GIL to run a Python callback (Work.on_complete, the one wait(stream=)
// registers) or a Python store's method: a deadlock (tests/device_soak.py seed 446, a
// sub-communicator dropped while its last operation's callback was due). The deleter lets
// the GIL go while the communicator is destroyed.
std::shared_ptr<Communicator> for_python(std::shared_ptr<Communicator> c) {
  if (!c) return c;
  Communicator* raw = c.get();
  return std::shared_ptr<Communicator>(raw, [keep = std::move(c)](Communicator*) mutable {
    if (Py_IsInitialized() && PyGILState_Check()) {
      py::gil_scoped_release nogil;
      keep.reset();
    } else {
      keep.reset();
    }
  });
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "uccl C++ core bindings";
  const auto release = py::call_guard<py::gil_scoped_release>();

  m.def("build_info", [] {
    py::dict d;
    d["version"] = UCCL_VERSION;
    d["verbs"] = std::string(UCCL_BUILT_VERBS) == "ON";
    d["cuda"] = std::string(UCCL_BUILT_CUDA) == "ON";
    d["torch"] = std::string(UCCL_BUILT_TORCH) == "ON";
    d["build_type"] = UCCL_BUILD_TYPE;
    d["sanitizers"] = std::string(UCCL_SANITIZERS) == "ON";
    std::string why = "not built (UCCL_WITH_VERBS)";
    const TransportEntry* verbs = find_transport("verbs");
    d["verbs_available"] = verbs && verbs->available(&why);
    d["verbs_unavailable_reason"] = why;
    // CUDA: built, and usable here (the module loads at run time; the reason when not).
    std::string cuda_why = "not built (UCCL_WITH_CUDA)";
    const DeviceBackend* cuda = find_device_backend("cuda");
    const bool cuda_ok = cuda && cuda->available(&cuda_why);
    d["cuda_available"] = cuda_ok;
    d["cuda_unavailable_reason"] = cuda_ok ? std::string() : cuda_why;
    d["cuda_devices"] = cuda ? cuda->device_count() : 0;
    d["device_backends"] = device_backend_list();
    return d;
  });
  register_device(m);
  // Which security modes are on (python -m uccl.info): the job key and TLS on tcp links.
  m.def("security_info", [] {
    py::dict d;
    d["authentication"] = auth_mode();
    d["encryption"] = tls_mode();
    d["keyed"] = job_key().ok() && !job_key().value().empty();
    std::string why;
    d["kernel_tls"] = kernel_tls_available(&why);
    d["kernel_tls_unavailable_reason"] = why;
    return d;
  });
  m.def("config_table", [] {
    py::list out;
    for (auto& v : config_table()) {
      py::dict d;
      d["name"] = v.name;
      d["value"] = v.value;
      d["default"] = v.def;
      d["meaning"] = v.meaning;
      d["is_set"] = v.is_set;
      d["section"] = v.section;
      d["error"] = v.error;  // why the environment's value was refused ("" when valid)
      d["job"] = v.job;      // the same on every rank (base/config.h Scope::kJob)
      out.append(d);
    }
    return out;
  });
  m.def("interfaces", [] {
    py::list out;
    for (auto& i : list_interfaces()) {
      py::dict d;
      d["name"] = i.name;
      d["address"] = i.addr.to_string();
      d["loopback"] = i.loopback;
      d["up"] = i.up;
      d["speed_gbps"] = i.speed_gbps;
      out.append(d);
    }
    return out;
  });

  py::class_<Store, std::shared_ptr<Store>>(m, "Store")
      .def("set", [](Store& s, const std::string& k, py::bytes v) { check(s.set(k, std::string(v))); })
      .def("get", [](Store& s, const std::string& k, double t) {
             std::string v;
             {
               py::gil_scoped_release nogil;
               v = unwrap(s.get(k, t));
             }
             return py::bytes(v);
           }, py::arg("key"), py::arg("timeout") = 300.0)
      .def("wait", [](Store& s, const std::vector<std::string>& keys, double t) { check(s.wait(keys, t)); },
           py::arg("keys"), py::arg("timeout") = 300.0, release)
      .def("add", [](Store& s, const std::string& k, int64_t d) { return unwrap(s.add(k, d)); }, release);

  py::class_<TcpStoreServer, std::unique_ptr<TcpStoreServer>>(m, "TcpStoreServer")
      .def_static("start", [](const std::string& host, int port) { return unwrap(TcpStoreServer::start(host, port)); },
                  py::arg("host"), py::arg("port") = 0)
      .def_property_readonly("port", &TcpStoreServer::port);
  m.def("connect_tcp_store", [](const std::string& host, int port, double timeout) {
          return unwrap(connect_tcp_store(host, port, timeout));
        }, py::arg("host"), py::arg("port"), py::arg("timeout") = 300.0, release);
  m.def("wrap_python_store", [](py::object obj) { return std::shared_ptr<Store>(new PyStore(obj)); });

  py::class_<Work, std::shared_ptr<Work>>(m, "Work")
      .def("wait", [](Work& w, double t) { check(w.wait(t)); }, py::arg("timeout") = -1.0, release)
      .def("wait_stream", [](Work& w, uintptr_t stream) { check(w.wait_stream(stream)); }, py::arg("stream"), release)
      .def("is_completed", &Work::is_completed, release)
      .def("error", [](Work& w) { check(w.status()); })
      .def_property_readonly("seq", &Work::seq)
      .def_property_readonly("collective", [](Work& w) { return std::string(collective_name(w.collective())); })
      .def("stats", [](Work& w) { return stats_dict(w.stats()); })
      .def("on_complete", [](Work& w, py::function fn) {
        // The callback may run on the progress thread: take the GIL there.
        auto holder = std::make_shared<py::object>(fn);
        w.on_complete([holder](const Status& s) {
          py::gil_scoped_acquire gil;
          try {
            (*holder)(s.ok() ? py::none() : py::cast(s.message()));
          } catch (py::error_already_set& e) {
            e.discard_as_unraisable("uccl Work.on_complete callback");
          }
          holder->release().dec_ref();
        });
      });

  // Communicator::will_wait() for Python's blocking calls. release() must be called (it may
  // take the engine lock, so it drops the GIL first; a destructor could not).
  struct WaitToken {
    std::shared_ptr<void> token;
  };
  py::class_<WaitToken>(m, "WaitToken").def("release", [](WaitToken& w) { w.token.reset(); }, release);

  using C = Communicator;
  py::class_<C, std::shared_ptr<C>>(m, "Communicator")
      .def_static("create", [](int rank, int size, std::shared_ptr<Store> store, py::dict opts) {
            CommOptions o = options_from(opts);
            py::gil_scoped_release nogil;
            return for_python(unwrap(C::create(rank, size, store, o)));
          }, py::arg("rank"), py::arg("size"), py::arg("store"), py::arg("options") = py::dict())
      .def_property_readonly("rank", &C::rank)
      .def_property_readonly("size", &C::size)
      .def("all_reduce", [](C& c, uintptr_t s, uintptr_t r, size_t n, int d, int op, double scalar, uintptr_t st) {
             AllReduceArgs a{ptr(s), ptr(r), n, dt(d), rop(op), scalar};
             a.stream = st;
             return unwrap(c.all_reduce(a));
           }, release)
      .def("reduce", [](C& c, uintptr_t s, uintptr_t r, size_t n, int d, int op, double scalar, int root, uintptr_t st) {
             ReduceArgs a;
             a.stream = st;
             a.send = ptr(s); a.recv = ptr(r); a.count = n; a.dtype = dt(d); a.op = rop(op); a.scalar = scalar; a.root = root;
             return unwrap(c.reduce(a));
           }, release)
      .def("broadcast", [](C& c, uintptr_t s, uintptr_t r, size_t n, int d, int root, uintptr_t st) {
             BroadcastArgs a{ptr(s), ptr(r), n, dt(d), root};
             a.stream = st;
             return unwrap(c.broadcast(a));
           }, release)
      .def("all_gather", [](C& c, uintptr_t s, uintptr_t r, size_t n, int d, uintptr_t st) {
             AllGatherArgs a{ptr(s), ptr(r), n, dt(d)};
             a.stream = st;
             return unwrap(c.all_gather(a));
           }, release)
      .def("all_gather_v", [](C& c, uintptr_t s, uintptr_t r, std::vector<size_t> counts, std::vector<size_t> displs, int d, uintptr_t st) {
             AllGatherVArgs a{ptr(s), ptr(r), counts, displs, dt(d)};
             a.stream = st;
             return unwrap(c.all_gather_v(a));
           }, release)
      .def("reduce_scatter", [](C& c, uintptr_t s, uintptr_t r, size_t n, int d, int op, double scalar, uintptr_t st) {
             ReduceScatterArgs a{ptr(s), ptr(r), n, dt(d), rop(op), scalar};
             a.stream = st;
             return unwrap(c.reduce_scatter(a));
           }, release)
      .def("reduce_scatter_v", [](C& c, uintptr_t s, uintptr_t r, std::vector<size_t> counts, int d, int op, double scalar, uintptr_t st) {
             ReduceScatterVArgs a{ptr(s), ptr(r), counts, dt(d), rop(op), scalar};
             a.stream = st;
             return unwrap(c.reduce_scatter_v(a));
           }, release)
      .def("all_to_all", [](C& c, uintptr_t s, uintptr_t r, size_t n, int d, uintptr_t st) {
             AllToAllArgs a{ptr(s), ptr(r), n, dt(d)};
             a.stream = st;
             return unwrap(c.all_to_all(a));
           }, release)
      .def("all_to_all_v", [](C& c, uintptr_t s, uintptr_t r, std::vector<size_t> sc, std::vector<size_t> sd,
                              std::vector<size_t> rc, std::vector<size_t> rd, int d, uintptr_t st) {
             AllToAllVArgs a{ptr(s), ptr(r), sc, sd, rc, rd, dt(d)};
             a.stream = st;
             return unwrap(c.all_to_all_v(a));
           }, release)
      .def("gather", [](C& c, uintptr_t s, uintptr_t r, size_t n, int d, int root, uintptr_t st) {
             GatherArgs a{ptr(s), ptr(r), n, dt(d), root};
             a.stream = st;
             return unwrap(c.gather(a));
           }, release)
      .def("scatter", [](C& c, uintptr_t s, uintptr_t r, size_t n, int d, int root, uintptr_t st) {
             ScatterArgs a{ptr(s), ptr(r), n, dt(d), root};
             a.stream = st;
             return unwrap(c.scatter(a));
           }, release)
      .def("p2p", [](C& c, std::vector<std::tuple<bool, uintptr_t, size_t, int, int, uint32_t>> ops, uintptr_t st) {
             std::vector<P2POp> v;
             for (auto& [is_send, p, n, d, peer, tag] : ops) v.push_back({is_send, ptr(p), n, dt(d), peer, tag, st});
             return unwrap(c.p2p(v));
           }, release)
      .def("barrier", [](C& c) { return unwrap(c.barrier()); }, release)
      .def("monitored_barrier", [](C& c, double timeout_s, bool wait_all_ranks) {
             Status s;
             {
               py::gil_scoped_release nogil;
               s = c.monitored_barrier(timeout_s, wait_all_ranks);
             }
             check(s);
           }, py::arg("timeout_s") = -1.0, py::arg("wait_all_ranks") = false)
      .def("will_wait", [](C& c) { return WaitToken{c.will_wait()}; }, release)
      .def("blocking_call", [](C& c, int kind, py::handle in, py::handle out, int op, int root) {
             return blocking_call(c, static_cast<BlockingKind>(kind), in, out, op, root);
           })
      .def("split", [](C& c, int color, int key, py::dict opts) {
             CommOptions o = options_from(opts);
             py::gil_scoped_release nogil;
             return for_python(unwrap(c.split(color, key, o)));
           }, py::arg("color"), py::arg("key"), py::arg("options") = py::dict())
      .def("new_group", [](C& c, std::vector<int> ranks, py::dict opts) {
             CommOptions o = options_from(opts);
             py::gil_scoped_release nogil;
             return for_python(unwrap(c.new_group(ranks, o)));
           }, py::arg("ranks"), py::arg("options") = py::dict())
      .def("shrink", [](C& c, py::dict opts) {
             CommOptions o = options_from(opts);
             py::gil_scoped_release nogil;
             return for_python(unwrap(c.shrink(o)));
           }, py::arg("options") = py::dict())
      .def("shrink_excluding", [](C& c, std::vector<int> exclude, py::dict opts) {
             CommOptions o = options_from(opts);
             py::gil_scoped_release nogil;
             return for_python(unwrap(c.shrink_excluding(exclude, o)));
           }, py::arg("exclude"), py::arg("options") = py::dict())
      .def("grow", [](C& c, int new_size, const std::string& tag, py::dict opts) {
             CommOptions o = options_from(opts);
             py::gil_scoped_release nogil;
             return for_python(unwrap(c.grow(new_size, tag, o)));
           }, py::arg("new_size"), py::arg("tag"), py::arg("options") = py::dict())
      .def_static("join", [](std::shared_ptr<Store> store, const std::string& tag, py::dict opts) {
             CommOptions o = options_from(opts);
             py::gil_scoped_release nogil;
             return for_python(unwrap(C::join(store, tag, o)));
           }, py::arg("store"), py::arg("tag"), py::arg("options") = py::dict())
      .def("abort", &C::abort, py::arg("why") = "abort() called", release)
      .def("error", [](C& c) { check(c.error()); }, release)
      .def("describe", &C::describe, release)
      .def("estimate", [](C& c, const std::string& coll, double nbytes, int root) {
             if (!(nbytes >= 0)) throw_status(InvalidArgument("estimate: nbytes must be >= 0"));
             const Collective k = unwrap(parse_collective(coll));
             py::gil_scoped_release nogil;  // the first call may fetch the peers' information
             return unwrap(c.estimate(k, static_cast<size_t>(nbytes), root));
           }, py::arg("collective"), py::arg("nbytes"), py::arg("root") = 0)
      .def("estimate_p2p", [](C& c, std::vector<std::tuple<bool, size_t, int>> ops) {
             std::vector<P2POp> v;
             for (auto& [is_send, nbytes, peer] : ops) v.push_back({is_send, nullptr, nbytes, DataType::kUint8, peer, 0, 0});
             py::gil_scoped_release nogil;
             return unwrap(c.estimate_p2p(v));
           }, py::arg("ops"));

  m.attr("ANY_SOURCE") = kAnySource;  // P2POp::peer of a receive from any rank

  // uccl::Estimator: a Communicator that runs nothing and adds up what uccl predicts for each
  // operation (comm.estimating() swaps it in for the block).
  py::class_<Estimator, C, std::shared_ptr<Estimator>>(m, "Estimator")
      .def(py::init([](std::shared_ptr<C> real) { return std::make_shared<Estimator>(std::move(real)); }),
           py::arg("real"))
      .def_property_readonly("seconds", &Estimator::seconds)
      .def_property_readonly("operations", &Estimator::operations)
      .def("first_error", [](Estimator& e) { check(e.first_error()); });

  // Address of a contiguous buffer-protocol object (numpy arrays): 0.1 us where numpy's own
  // ctypes.data costs 0.8 us, and every collective resolves two buffers.
  m.def("buffer_address", [](py::handle obj) {
    Py_buffer view;
    if (PyObject_GetBuffer(obj.ptr(), &view, PyBUF_ANY_CONTIGUOUS) != 0) throw py::error_already_set();
    const auto address = reinterpret_cast<uintptr_t>(view.buf);
    PyBuffer_Release(&view);
    return address;
  });

  register_perf_loop(m);  // uccl-perf's timed loop (perf_loop.cc)
  register_cost(m);       // uccl.cost: the topology file, cost model and algorithm choice
  register_enums(m);      // DTYPES, DTYPE_SIZE, RED_OPS
}
