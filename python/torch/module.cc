// uccl._torch: the Python face of UcclBackend. uccl/_torch_backend.py registers a creator with
// torch.distributed that constructs ProcessGroupUCCL from torch's per-group store and options.
//
// Built against torch's bundled pybind11 (see torch_backend.cmake) so that c10d.Store arguments
// and the c10d.Backend base class are the very types torch registered.
#include <torch/csrc/utils/pybind.h>

#include "backend.h"
#include "topology/topology.h"
#include "transports/registry.h"

namespace py = pybind11;
using uccl_torch::UcclBackend;

namespace {

uccl::CommOptions make_options(double timeout_s, const std::string& transport, const std::string& algorithm,
                               const std::string& socket_ifname, const std::string& name) {
  uccl::CommOptions o;
  o.timeout_s = timeout_s;
  o.transport = transport;
  o.algorithm = algorithm;
  o.socket_ifname = socket_ifname;
  o.name = name;
  return o;
}

// A failed Status as (code, peer or None, message): uccl/torch.py raises uccl's typed error.
py::object status_tuple(const uccl::Status& s) {
  if (s.ok()) return py::none();
  return py::make_tuple(static_cast<int>(s.code()), s.peer() >= 0 ? py::cast(s.peer()) : py::none(), s.message());
}

}  // namespace

PYBIND11_MODULE(_torch, m) {
  m.doc() = "uccl's torch.distributed backend (c10d::Backend subclass). Use it through "
            "torch.distributed.init_process_group(backend='uccl').";
  // The base class and Store type must be registered before we refer to them.
  py::module_::import("torch.distributed");

  py::class_<UcclBackend, c10d::Backend, c10::intrusive_ptr<UcclBackend>>(m, "ProcessGroupUCCL")
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, double timeout_s,
                       const std::string& transport, const std::string& algorithm, const std::string& socket_ifname,
                       const std::string& name) {
             return c10::make_intrusive<UcclBackend>(store, rank, size,
                                                     make_options(timeout_s, transport, algorithm, socket_ifname, name));
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout_s") = -1.0,
           py::arg("transport") = "", py::arg("algorithm") = "", py::arg("socket_ifname") = "",
           py::arg("name") = "",
           // Rendezvous blocks on the store until every rank arrived: let other Python threads run.
           py::call_guard<py::gil_scoped_release>())
      .def("describe", &UcclBackend::describe, "Levels, peers and the transport chosen per peer.",
           py::call_guard<py::gil_scoped_release>())
      // c10d binds get_error() only on NCCL's class; ours returns the same dist.ErrorType enum.
      // Cumulative bytes of this group's finished ops: {"ops", "bytes_sent": {transport: n},
      // "bytes_sent_by_level": {"host"|"cluster"|"inter_cluster": n}} (uccl.parallel reports).
      .def("traffic",
           [](UcclBackend& b) {
             auto& t = *b.traffic();
             std::lock_guard<std::mutex> lk(t.mu);
             py::dict d, by_transport, by_level;
             for (const uccl::TransportEntry* e : uccl::transport_table())
               by_transport[e->name.c_str()] = t.sum.bytes_sent_by_transport[static_cast<int>(e->id)];
             for (int l = 0; l < 3; ++l) by_level[uccl::level_name(l)] = t.sum.bytes_sent_by_level[l];
             d["ops"] = t.ops;
             d["bytes_sent"] = by_transport;
             d["bytes_sent_by_level"] = by_level;
             return d;
           })
      .def("get_error", &UcclBackend::getError, py::call_guard<py::gil_scoped_release>())
      // torch.distributed._time_estimator calls these on the group's backend (NCCL's names).
      .def("_start_time_estimate", &UcclBackend::start_time_estimate, py::call_guard<py::gil_scoped_release>())
      .def("_end_time_estimate", &UcclBackend::end_time_estimate, py::call_guard<py::gil_scoped_release>())
      // (code, peer or None, message) of the communicator's first error, or None.
      .def("_last_error", [](UcclBackend& b) {
        uccl::Status s;
        {
          py::gil_scoped_release nogil;
          s = b.last_error();
        }
        return status_tuple(s);
      })
      // Fails every pending work (their waits raise DistBackendError) and refuses new ops; never blocks.
      .def("abort", &UcclBackend::abort, py::call_guard<py::gil_scoped_release>())
      // Lets go of the communicator (its threads, sockets and shared memory go with the last work).
      .def("shutdown", &UcclBackend::shutdown, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("timeout_s", [](UcclBackend& b) { return b.comm_options().timeout_s; })
      .def_property_readonly("transport", [](UcclBackend& b) { return b.comm_options().transport; })
      .def_property_readonly("algorithm", [](UcclBackend& b) { return b.comm_options().algorithm; })
      .def_property_readonly("socket_ifname", [](UcclBackend& b) { return b.comm_options().socket_ifname; })
      .def_property_readonly("name", [](UcclBackend& b) { return b.comm_options().name; });

  // The same construction, with the failure returned rather than raised: (backend, None) or
  // (None, (code, peer, message)), so uccl.torch raises uccl's typed errors with code and peer.
  m.def(
      "_create",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, double timeout_s,
         const std::string& transport, const std::string& algorithm, const std::string& socket_ifname,
         const std::string& name) -> py::object {
        uccl::CommOptions o = make_options(timeout_s, transport, algorithm, socket_ifname, name);
        uccl::Result<std::shared_ptr<uccl::Communicator>> r = [&] {
          py::gil_scoped_release nogil;  // rendezvous blocks on the store
          return UcclBackend::create_comm(store, rank, size, o);
        }();
        if (!r.ok()) return py::make_tuple(py::none(), status_tuple(r.status()));
        auto b = c10::make_intrusive<UcclBackend>(store, rank, size, o, r.take());
        return py::make_tuple(py::cast(b), py::none());
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout_s") = -1.0, py::arg("transport") = "",
      py::arg("algorithm") = "", py::arg("socket_ifname") = "", py::arg("name") = "");
}
