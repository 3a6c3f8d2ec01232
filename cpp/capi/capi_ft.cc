// The C API, part 3: fault tolerance and elasticity (uccl_comm_shrink, uccl_comm_shrink_excluding,
// uccl_comm_grow, uccl_comm_join) over Communicator::shrink / shrink_excluding / grow / join
// (include/uccl/communicator.h).
#include <cstddef>
#include <string>
#include <vector>

#include "base/config.h"
#include "capi/capi_internal.h"

using uccl::capi::guard;
using uccl::capi::invalid;
using uccl::capi::options_of;
using uccl::capi::record;


extern "C" {

uccl_result_t uccl_comm_shrink(uccl_comm_t comm, uccl_comm_t* newcomm, const uccl_config_t* config) {
  const char* fn = __func__;
  return guard(fn, [&] {
    if (!comm || !newcomm) return invalid(fn, comm ? "newcomm is NULL" : "comm is NULL");
    *newcomm = nullptr;
    if (config && config->size < sizeof(size_t)) return invalid(fn, "config->size is not set (use UCCL_CONFIG_INITIALIZER)");
    auto r = comm->c->shrink(options_of(config));
    if (!r.ok()) return record(r.status().with_context(fn));
    *newcomm = new uccl_comm{r.take(), nullptr};
    return UCCL_SUCCESS;
  });
}

uccl_result_t uccl_comm_shrink_excluding(uccl_comm_t comm, const int* exclude, int nexclude, uccl_comm_t* newcomm,
                                         const uccl_config_t* config) {
  const char* fn = __func__;
  return guard(fn, [&] {
    if (!comm || !newcomm) return invalid(fn, comm ? "newcomm is NULL" : "comm is NULL");
    *newcomm = nullptr;
    if (nexclude < 0 || (nexclude > 0 && !exclude))
      return invalid(fn, nexclude < 0 ? "nexclude is negative" : "exclude is NULL with nexclude > 0");
    if (config && config->size < sizeof(size_t)) return invalid(fn, "config->size is not set (use UCCL_CONFIG_INITIALIZER)");
    auto r = comm->c->shrink_excluding(std::vector<int>(exclude, exclude + nexclude), options_of(config));
    if (!r.ok()) return record(r.status().with_context(fn));
    *newcomm = new uccl_comm{r.take(), nullptr};
    return UCCL_SUCCESS;
  });
}

uccl_result_t uccl_comm_grow(uccl_comm_t comm, int new_size, const char* tag, uccl_comm_t* newcomm,
                             const uccl_config_t* config) {
  const char* fn = __func__;
  return guard(fn, [&] {
    if (!comm || !newcomm || !tag) return invalid(fn, !comm ? "comm is NULL" : !newcomm ? "newcomm is NULL" : "tag is NULL");
    *newcomm = nullptr;
    if (config && config->size < sizeof(size_t)) return invalid(fn, "config->size is not set (use UCCL_CONFIG_INITIALIZER)");
    auto r = comm->c->grow(new_size, tag, options_of(config));
    if (!r.ok()) return record(r.status().with_context(fn));
    // The store this process serves now serves the grown communicator too: it moves with it.
    *newcomm = new uccl_comm{r.take(), std::move(comm->server)};
    return UCCL_SUCCESS;
  });
}

uccl_result_t uccl_comm_join(const char* host, int port, const char* tag, uccl_comm_t* newcomm,
                             const uccl_config_t* config) {
  const char* fn = __func__;
  return guard(fn, [&] {
    if (!host || !tag || !newcomm) return invalid(fn, !host ? "host is NULL" : !tag ? "tag is NULL" : "newcomm is NULL");
    *newcomm = nullptr;
    if (port <= 0 || port > 65535) return invalid(fn, "port " + std::to_string(port) + " is not a TCP port");
    if (config && config->size < sizeof(size_t)) return invalid(fn, "config->size is not set (use UCCL_CONFIG_INITIALIZER)");
    const uccl::CommOptions o = options_of(config);
    auto store = uccl::connect_tcp_store(host, port, o.timeout_s > 0 ? o.timeout_s : uccl::kTimeoutS.get());
    if (!store.ok()) return record(store.status().with_context(fn));
    auto r = uccl::Communicator::join(store.take(), tag, o);
    if (!r.ok()) return record(r.status().with_context(fn));
    *newcomm = new uccl_comm{r.take(), nullptr};
    return UCCL_SUCCESS;
  });
}

}  // extern "C"
