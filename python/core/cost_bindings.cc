// _core's cost model and enums: what uccl.cost and uccl._buffers take from C++ instead of
// copying (one definition of the dtype and op codes, of the topology file's meaning, of the cost
// model and of the algorithm choice, shared by the communicator and Python planners).
#include "python/core/cost_bindings.h"

#include <pybind11/stl.h>

#include <optional>
#include <set>

#include "algorithms/schedule.h"
#include "algorithms/select.h"
#include "base/config.h"
#include "uccl/types.h"
#include "python/core/py_errors.h"
#include "topology/cost_model.h"
#include "topology/declared_topology.h"

namespace py = pybind11;

namespace uccl {
namespace {

using TopoPtr = std::shared_ptr<const Topology>;
// What Python holds (pybind11 holders cannot point to const).
struct PyTopology {
  TopoPtr t;
};

template <class T>
T unwrap(Result<T> r) {
  if (!r.ok()) throw_status(r.status());
  return r.take();
}

// The group's own Topology: ranks (global, in group order) become ranks 0..k-1, as in a
// sub-communicator, whose Topology is built from its members' PeerInfos in the same way.
TopoPtr group_topology(const TopoPtr& t, const std::optional<std::vector<int>>& ranks) {
  if (!ranks) return t;
  if (ranks->empty()) throw_status(InvalidArgument("ranks is empty"));
  std::set<int> seen;
  std::vector<PeerInfo> peers;
  for (int r : *ranks) {
    if (r < 0 || r >= t->size())
      throw_status(InvalidArgument("rank " + std::to_string(r) + " out of range for a world of " +
                                   std::to_string(t->size())));
    if (!seen.insert(r).second) throw_status(InvalidArgument("rank " + std::to_string(r) + " appears twice in ranks"));
    peers.push_back(t->peer(r));
    peers.back().rank = static_cast<int>(peers.size()) - 1;
  }
  return Topology::build(std::move(peers));
}

SelectRequest request(const TopoPtr& group, const std::string& coll, double nbytes) {
  if (!(nbytes >= 0)) throw_status(InvalidArgument("nbytes must be >= 0"));
  SelectRequest r;
  r.coll = unwrap(parse_collective(coll));
  r.bytes = static_cast<size_t>(nbytes);
  r.size = group->size();
  r.topo = group.get();
  r.small_msg_bytes = kSmallMsgBytes.get();  // as a communicator in this process would
  return r;
}

Algorithm algorithm_of(const std::string& name) {
  auto a = parse_algorithm(name);
  if (!a.ok()) throw_status(a.status());
  return a.value();
}

}  // namespace

void register_cost(py::module_& m) {
  auto check_rank = [](const PyTopology& p, int r) {
    if (r < 0 || r >= p.t->size())
      throw_status(InvalidArgument("rank " + std::to_string(r) + " out of range for a world of " +
                                   std::to_string(p.t->size())));
    return r;
  };
  py::class_<PyTopology>(m, "CostTopology")
      .def_static("from_file", [](const std::string& path, const std::vector<std::string>& placement) {
        auto doc = read_topology_file(path);
        if (!doc.ok()) throw_status(doc.status().with_context("topology file"));
        return PyTopology{unwrap(declared_topology(doc.value(), placement))};
      })
      .def_static("from_text", [](const std::string& text, const std::string& filename,
                                  const std::vector<std::string>& placement) {
        auto doc = parse_topo_text(text, filename);
        if (!doc.ok()) throw_status(doc.status().with_context("topology"));
        return PyTopology{unwrap(declared_topology(doc.value(), placement))};
      })
      .def_property_readonly("world_size", [](const PyTopology& p) { return p.t->size(); })
      .def("host_of", [=](const PyTopology& p, int r) { return p.t->host_of(check_rank(p, r)); })
      .def("cluster_of", [=](const PyTopology& p, int r) { return p.t->cluster_of(check_rank(p, r)); })
      .def("host_name", [=](const PyTopology& p, int r) { return p.t->peer(check_rank(p, r)).hostname; })
      .def("cluster_name", [=](const PyTopology& p, int r) { return p.t->peer(check_rank(p, r)).cluster; })
      .def("num_hosts", [](const PyTopology& p) { return p.t->num_hosts(); })
      .def("num_clusters", [](const PyTopology& p) { return p.t->num_clusters(); })
      .def("describe", [](const PyTopology& p) { return p.t->describe(-1); });

  m.def("cost_predict", [](const PyTopology& t, const std::string& coll, double nbytes,
                           std::optional<std::vector<int>> ranks, const std::string& algorithm) {
    TopoPtr g = group_topology(t.t, ranks);
    auto r = predict_algorithm(request(g, coll, nbytes), algorithm_of(algorithm));
    if (!r.ok()) throw_status(r.status());
    return r.value();
  });
  m.def("cost_choose", [](const PyTopology& t, const std::string& coll, double nbytes, std::optional<std::vector<int>> ranks) {
    TopoPtr g = group_topology(t.t, ranks);
    const Selection s = select_algorithm(request(g, coll, nbytes));
    return py::make_tuple(algorithm_name(s.algo), s.cost, s.reason);
  });
  m.def("cost_predict_p2p", [=](const PyTopology& t, int src, int dst, double nbytes) {
    if (!(nbytes >= 0)) throw_status(InvalidArgument("nbytes must be >= 0"));
    return predict_p2p(*t.t, check_rank(t, src), check_rank(t, dst), nbytes);
  });
}

void register_enums(py::module_& m) {
  py::dict dtypes, sizes, ops;
  for (int t = 0; t < kNumDataTypes; ++t) {
    dtypes[dtype_name(static_cast<DataType>(t))] = t;
    sizes[py::int_(t)] = dtype_size(static_cast<DataType>(t));
  }
  for (int o = 0; o < kNumRedOps; ++o) ops[redop_name(static_cast<RedOp>(o))] = o;
  m.attr("DTYPES") = dtypes;      // name -> uccl::DataType value
  m.attr("DTYPE_SIZE") = sizes;   // value -> bytes per element
  m.attr("RED_OPS") = ops;        // name -> uccl::RedOp value
}

}  // namespace uccl
