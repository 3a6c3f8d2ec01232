// Device functions of _core (see device_bindings.h). Thin: addresses and byte counts in, typed
// errors out; uccl/sim.py builds SimArray on them.
#include "python/core/device_bindings.h"

#include <pybind11/stl.h>

#include <memory>

#include "base/device.h"
#include "base/sim_device.h"
#include "python/core/py_errors.h"
#include "transports/staged/staged_endpoint.h"

namespace py = pybind11;

namespace uccl {
namespace {

void check(const Status& s) {
  if (!s.ok()) throw_status(s);
}

// A simulated stream owned by Python (uccl.sim.Stream); its handle is what `stream=` takes.
struct PyStream {
  std::unique_ptr<DeviceStream> s;
};

CopyDir dir_of(const std::string& d) {
  if (d == "h2d") return CopyDir::kHostToDevice;
  if (d == "d2h") return CopyDir::kDeviceToHost;
  if (d == "d2d") return CopyDir::kDeviceToDevice;
  throw_status(InvalidArgument("copy direction must be h2d, d2h or d2d, got " + d));
  return CopyDir::kHostToHost;
}

}  // namespace

py::list device_backend_list() {
  py::list out;
  for (const DeviceBackendInfo& i : device_backend_infos()) {
    py::dict d;
    d["name"] = i.name;
    d["kind"] = memory_kind_name(i.kind);
    d["available"] = i.available;
    d["why_not"] = i.why_not;
    d["devices"] = i.devices;
    d["stream_wait"] = i.stream_wait;
    d["copies"] = i.copies;
    d["staging_chunk_bytes"] = i.staging_chunk;
    out.append(d);
  }
  return out;
}

void register_device(py::module_& m) {
  const auto release = py::call_guard<py::gil_scoped_release>();
  m.def("device_backends", &device_backend_list);
  m.def("memory_location", [](uintptr_t addr) {
    MemoryLoc l = locate_memory(reinterpret_cast<const void*>(addr));
    return py::make_tuple(l.is_device() ? l.backend->name() : "host", l.ordinal);
  });
  m.def("staged_bounce_bytes", &staged_bounce_bytes);

  py::class_<PyStream>(m, "SimStream")
      .def_property_readonly("handle", [](PyStream& s) { return s.s->handle(); })
      .def_property_readonly("device", [](PyStream& s) { return s.s->ordinal(); })
      .def("synchronize", [](PyStream& s) { check(sim_backend()->synchronize(s.s.get())); }, release)
      .def("set_capturing", [](PyStream& s, bool on) { check(sim_backend()->set_capturing(s.s.get(), on)); });
  m.def("sim_stream", [](int ordinal) {
    auto s = sim_backend()->create_stream(ordinal);
    if (!s.ok()) throw_status(s.status());
    return std::unique_ptr<PyStream>(new PyStream{s.take()});
  });
  m.def("sim_devices", [] { return sim_backend()->device_count(); });
  m.def("sim_alloc", [](size_t bytes, int ordinal) {
    auto p = sim_backend()->alloc(ordinal, bytes);
    if (!p.ok()) throw_status(p.status());
    return reinterpret_cast<uintptr_t>(p.value());
  });
  m.def("sim_free", [](uintptr_t p) { sim_backend()->free(reinterpret_cast<void*>(p)); });
  m.def("sim_allocated_bytes", [] { return sim_backend()->allocated_bytes(); });
  m.def("sim_memory_stats", [] {  // requests served without a device-wide synchronization
    SignalSafeMemory::Stats s = sim_backend()->memory_stats();
    py::dict d;
    d["unsync_allocs"] = s.unsync_allocs;
    d["pageable_allocs"] = s.pageable_allocs;
    d["deferred_frees"] = s.deferred_frees;
    d["reserve_allocs"] = s.reserve_allocs;
    d["reserve_bytes"] = s.reserve_bytes;
    return d;
  });
  m.def("sim_set_copy_speed", [](double gbps, double latency_us) {
    if (gbps < 0 || latency_us < 0) throw_status(InvalidArgument("copy speed and latency must be >= 0"));
    sim_backend()->set_copy_speed(gbps, latency_us);
  });
  m.def("sim_copy_speed", [] { return py::make_tuple(sim_backend()->copy_gbps(), sim_backend()->copy_latency_us()); });
  // A copy queued on `stream` (a handle; 0: the device's default stream); waits for it when sync.
  m.def("sim_copy", [](uintptr_t dst, uintptr_t src, size_t bytes, const std::string& dir, int ordinal,
                       uintptr_t stream, bool sync) {
        const CopyDir d = dir_of(dir);
        py::gil_scoped_release nogil;
        auto st = sim_backend()->wrap_stream(ordinal, stream);
        if (!st.ok()) throw_status(st.status());
        check(sim_backend()->copy_async(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes, d,
                                        st.value().get()));
        if (sync) check(sim_backend()->synchronize(st.value().get()));
      });
}

}  // namespace uccl
