// The C API, part 1: version, errors, communicators (unique id, store address, split, abort,
// destroy) and requests. Part 2 (capi_ops.cc) issues the operations.
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <random>

#include "capi/capi_internal.h"
#include "base/config.h"
#include "base/net.h"

using uccl::Status;
using uccl::capi::guard;
using uccl::capi::invalid;
using uccl::capi::options_of;
using uccl::capi::record;

namespace {

thread_local std::string t_last_error;
thread_local int t_last_peer = -1;

uccl_result_t to_result(uccl::Code c) {
  switch (c) {
    case uccl::Code::kOk: return UCCL_SUCCESS;
    case uccl::Code::kInvalidArgument: return UCCL_ERR_INVALID_ARGUMENT;
    case uccl::Code::kNotSupported: return UCCL_ERR_NOT_SUPPORTED;
    case uccl::Code::kTimeout: return UCCL_ERR_TIMEOUT;
    case uccl::Code::kRemoteError: return UCCL_ERR_REMOTE;
    case uccl::Code::kMismatch: return UCCL_ERR_MISMATCH;
    case uccl::Code::kAborted: return UCCL_ERR_ABORTED;
    case uccl::Code::kSystemError: return UCCL_ERR_SYSTEM;
    case uccl::Code::kUnauthenticated: return UCCL_ERR_UNAUTHENTICATED;
    default: return UCCL_ERR_INTERNAL;
  }
}

double store_timeout(const uccl::CommOptions& o) {
  return o.timeout_s > 0 ? o.timeout_s : uccl::kTimeoutS.get();
}

// Stores served by this process for ids it made, until a communicator of this process takes
// one over (it then lives as long as that communicator) or the process ends.
std::mutex g_served_mu;
std::map<std::string, std::unique_ptr<uccl::TcpStoreServer>> g_served;

constexpr char kIdMagic[] = "uccl-id/1";

uccl_result_t create(uccl_comm_t* out, int nranks, int rank, const std::string& host, int port,
                     std::unique_ptr<uccl::TcpStoreServer> server, const uccl_config_t* cfg, const char* fn) {
  if (!out) return invalid(fn, "comm is NULL");
  *out = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return invalid(fn, "rank " + std::to_string(rank) + " is outside [0, " + std::to_string(nranks) + ")");
  if (cfg && cfg->size < sizeof(size_t)) return invalid(fn, "config->size is not set (use UCCL_CONFIG_INITIALIZER)");
  uccl::CommOptions opts = options_of(cfg);
  auto store = uccl::connect_tcp_store(host, port, store_timeout(opts));
  if (!store.ok()) return record(store.status().with_context(fn));
  auto comm = uccl::Communicator::create(rank, nranks, store.take(), opts);
  if (!comm.ok()) return record(comm.status().with_context(fn));
  *out = new uccl_comm{comm.take(), std::move(server)};
  return UCCL_SUCCESS;
}

}  // namespace

namespace uccl::capi {

uccl::CommOptions options_of(const uccl_config_t* cfg) {
  uccl::CommOptions o;
  if (!cfg) return o;
  auto field = [&](size_t end) { return cfg->size >= end; };  // only fields the caller's struct has
  if (field(offsetof(uccl_config_t, timeout_s) + sizeof(double))) o.timeout_s = cfg->timeout_s;
  if (field(offsetof(uccl_config_t, transport) + sizeof(char*)) && cfg->transport) o.transport = cfg->transport;
  if (field(offsetof(uccl_config_t, algorithm) + sizeof(char*)) && cfg->algorithm) o.algorithm = cfg->algorithm;
  if (field(offsetof(uccl_config_t, socket_ifname) + sizeof(char*)) && cfg->socket_ifname)
    o.socket_ifname = cfg->socket_ifname;
  if (field(offsetof(uccl_config_t, name) + sizeof(char*)) && cfg->name) o.name = cfg->name;
  return o;
}

uccl_result_t record(const Status& s) {
  if (!s.ok()) {
    t_last_error = s.message();
    t_last_peer = s.peer();
  }
  return to_result(s.code());
}

uccl_result_t invalid(const char* fn, const std::string& what) {
  return record(InvalidArgument(std::string(fn) + ": " + what));
}

}  // namespace uccl::capi

extern "C" {

int uccl_get_version(void) { return UCCL_VERSION_CODE; }

const char* uccl_error_string(uccl_result_t r) {
  switch (r) {
    case UCCL_SUCCESS: return "success";
    case UCCL_ERR_INVALID_ARGUMENT: return "invalid argument";
    case UCCL_ERR_NOT_SUPPORTED: return "not supported";
    case UCCL_ERR_TIMEOUT: return "timeout";
    case UCCL_ERR_REMOTE: return "remote error (a peer failed)";
    case UCCL_ERR_MISMATCH: return "mismatched operations across ranks";
    case UCCL_ERR_ABORTED: return "aborted";
    case UCCL_ERR_SYSTEM: return "system error";
    case UCCL_ERR_INTERNAL: return "internal error";
    case UCCL_IN_PROGRESS: return "in progress";
    case UCCL_ERR_UNAUTHENTICATED: return "unauthenticated (job key refused)";
  }
  return "unknown uccl_result_t";
}

const char* uccl_last_error(void) { return t_last_error.c_str(); }
int uccl_last_error_peer(void) { return t_last_peer; }

uccl_result_t uccl_get_unique_id(uccl_unique_id* id) {
  const char* fn = __func__;
  return guard(fn, [&] {
    if (!id) return invalid(fn, "id is NULL");
    // Serve on every address; advertise the first interface peers can reach (UCCL_SOCKET_IFNAME).
    auto ifs = uccl::select_interfaces(uccl::kSocketIfname.get(), "AF_INET");
    std::string host = ifs.empty() ? "127.0.0.1" : ifs.front().addr.to_string();
    host = host.substr(0, host.rfind(':'));
    auto server = uccl::TcpStoreServer::start("0.0.0.0", 0);
    if (!server.ok()) return record(server.status().with_context(fn));
    std::random_device rd;
    char nonce[17];
    std::snprintf(nonce, sizeof nonce, "%08x%08x", rd(), rd());
    std::memset(id->internal, 0, sizeof id->internal);
    int n = std::snprintf(id->internal, sizeof id->internal, "%s %s %d %s", kIdMagic, nonce,
                          server.value()->port(), host.c_str());
    if (n < 0 || n >= static_cast<int>(sizeof id->internal)) return invalid(fn, "host name too long: " + host);
    std::lock_guard<std::mutex> lk(g_served_mu);
    g_served[nonce] = server.take();
    return UCCL_SUCCESS;
  });
}

uccl_result_t uccl_comm_init_rank(uccl_comm_t* comm, int nranks, const uccl_unique_id* id, int rank,
                                  const uccl_config_t* config) {
  const char* fn = __func__;
  return guard(fn, [&] {
    if (!id) return invalid(fn, "id is NULL");
    char magic[16] = {}, nonce[17] = {}, host[UCCL_UNIQUE_ID_BYTES] = {};
    int port = 0;
    std::string text(id->internal, strnlen(id->internal, sizeof id->internal));
    if (std::sscanf(text.c_str(), "%15s %16s %d %127s", magic, nonce, &port, host) != 4 ||
        std::strcmp(magic, kIdMagic) != 0)
      return invalid(fn, "not a uccl_unique_id from uccl_get_unique_id");
    std::unique_ptr<uccl::TcpStoreServer> server;
    {
      std::lock_guard<std::mutex> lk(g_served_mu);
      auto it = g_served.find(nonce);
      if (it != g_served.end()) {
        server = std::move(it->second);
        g_served.erase(it);
      }
    }
    return create(comm, nranks, rank, host, port, std::move(server), config, fn);
  });
}

uccl_result_t uccl_comm_init_store(uccl_comm_t* comm, int nranks, int rank, const char* host, int port,
                                   const uccl_config_t* config) {
  const char* fn = __func__;
  return guard(fn, [&] {
    if (!host) return invalid(fn, "host is NULL");
    if (port <= 0 || port > 65535) return invalid(fn, "port " + std::to_string(port) + " is not a TCP port");
    std::unique_ptr<uccl::TcpStoreServer> server;
    if (rank == 0 && nranks > 0) {
      auto s = uccl::TcpStoreServer::start(std::strchr(host, ':') ? "::" : "0.0.0.0", port);
      if (!s.ok()) return record(s.status().with_context(fn));
      server = s.take();
    }
    return create(comm, nranks, rank, host, port, std::move(server), config, fn);
  });
}

uccl_result_t uccl_comm_split(uccl_comm_t comm, int color, int key, uccl_comm_t* newcomm,
                              const uccl_config_t* config) {
  const char* fn = __func__;
  return guard(fn, [&] {
    if (!comm || !newcomm) return invalid(fn, comm ? "newcomm is NULL" : "comm is NULL");
    *newcomm = nullptr;
    auto r = comm->c->split(color, key, options_of(config));
    if (!r.ok()) return record(r.status().with_context(fn));
    if (r.value()) *newcomm = new uccl_comm{r.take(), nullptr};
    return UCCL_SUCCESS;
  });
}

uccl_result_t uccl_comm_abort(uccl_comm_t comm) {
  const char* fn = __func__;
  return guard(fn, [&] {
    if (!comm) return invalid(fn, "comm is NULL");
    comm->c->abort("uccl_comm_abort called");
    return UCCL_SUCCESS;
  });
}

uccl_result_t uccl_comm_destroy(uccl_comm_t comm) {
  const char* fn = __func__;
  return guard(fn, [&] {
    delete comm;
    return UCCL_SUCCESS;
  });
}

uccl_result_t uccl_comm_rank(uccl_comm_t comm, int* rank) {
  if (!comm || !rank) return invalid(__func__, "comm or rank is NULL");
  *rank = comm->c->rank();
  return UCCL_SUCCESS;
}

uccl_result_t uccl_comm_size(uccl_comm_t comm, int* size) {
  if (!comm || !size) return invalid(__func__, "comm or size is NULL");
  *size = comm->c->size();
  return UCCL_SUCCESS;
}

uccl_result_t uccl_comm_error(uccl_comm_t comm) {
  const char* fn = __func__;
  return guard(fn, [&] { return comm ? record(comm->c->error()) : invalid(fn, "comm is NULL"); });
}

uccl_result_t uccl_test(uccl_request_t request) {
  const char* fn = __func__;
  return guard(fn, [&] {
    if (!request) return invalid(fn, "request is NULL");
    if (!request->work->is_completed()) return UCCL_IN_PROGRESS;
    return record(request->work->status());
  });
}

uccl_result_t uccl_wait(uccl_request_t request, double timeout_s) {
  const char* fn = __func__;
  return guard(fn, [&] {
    if (!request) return invalid(fn, "request is NULL");
    return record(request->work->wait(timeout_s));
  });
}

uccl_result_t uccl_request_free(uccl_request_t request) {
  const char* fn = __func__;
  return guard(fn, [&] {
    delete request;
    return UCCL_SUCCESS;
  });
}

}  // extern "C"
