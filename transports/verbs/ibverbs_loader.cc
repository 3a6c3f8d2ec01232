#include "transports/verbs/ibverbs_loader.h"

#include <dlfcn.h>

#include <cstring>
#include <mutex>

namespace uccl {
namespace {

struct LoaderState {
  std::mutex mu;
  std::string soname = "libibverbs.so.1";
  bool tried = false;
  bool ok = false;
  std::string why;
  IbvApi api{};
};

LoaderState& state() {
  static LoaderState s;
  return s;
}

// dlsym into a typed member; records the first missing symbol.
template <class F>
bool bind(void* lib, const char* name, F* slot, std::string* why) {
  void* p = dlsym(lib, name);
  if (!p) {
    if (why->empty()) *why = std::string("symbol ") + name + " missing in libibverbs";
    return false;
  }
  std::memcpy(slot, &p, sizeof p);
  return true;
}

void load(LoaderState& s) {
  s.tried = true;
  s.ok = false;
  s.why.clear();
  // RTLD_NOW: a broken or partial libibverbs fails here, not in the middle of a transfer.
  void* lib = dlopen(s.soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    s.why = "cannot load " + s.soname + " (rdma-core not installed?): " + (e ? e : "dlopen failed");
    return;
  }
  IbvApi a{};
  std::string why;
  bool ok = true;
  ok &= bind(lib, "ibv_get_device_list", &a.get_device_list, &why);
  ok &= bind(lib, "ibv_free_device_list", &a.free_device_list, &why);
  ok &= bind(lib, "ibv_get_device_name", &a.get_device_name, &why);
  ok &= bind(lib, "ibv_open_device", &a.open_device, &why);
  ok &= bind(lib, "ibv_close_device", &a.close_device, &why);
  ok &= bind(lib, "ibv_query_device", &a.query_device, &why);
  ok &= bind(lib, "ibv_query_port", &a.query_port_compat, &why);
  ok &= bind(lib, "ibv_query_gid", &a.query_gid, &why);
  ok &= bind(lib, "ibv_alloc_pd", &a.alloc_pd, &why);
  ok &= bind(lib, "ibv_dealloc_pd", &a.dealloc_pd, &why);
  ok &= bind(lib, "ibv_reg_mr", &a.reg_mr, &why);
  ok &= bind(lib, "ibv_dereg_mr", &a.dereg_mr, &why);
  ok &= bind(lib, "ibv_create_cq", &a.create_cq, &why);
  ok &= bind(lib, "ibv_destroy_cq", &a.destroy_cq, &why);
  ok &= bind(lib, "ibv_create_qp", &a.create_qp, &why);
  ok &= bind(lib, "ibv_modify_qp", &a.modify_qp, &why);
  ok &= bind(lib, "ibv_destroy_qp", &a.destroy_qp, &why);
  ok &= bind(lib, "ibv_wc_status_str", &a.wc_status_str, &why);
  if (!ok) {
    s.why = s.soname + ": " + why;
    dlclose(lib);
    return;
  }
  s.api = a;
  s.ok = true;
}

}  // namespace

const IbvApi* ibverbs(std::string* why) {
  LoaderState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.tried) load(s);
  if (!s.ok) {
    if (why) *why = s.why;
    return nullptr;
  }
  return &s.api;
}

int verbs_query_port(const IbvApi* api, ibv_context* ctx, uint8_t port, ibv_port_attr* attr) {
  // Same logic as verbs.h's ___ibv_query_port, minus the link-time reference.
  verbs_context* vctx = verbs_get_ctx_op(ctx, query_port);
  if (vctx) return vctx->query_port(ctx, port, attr, sizeof(*attr));
  std::memset(attr, 0, sizeof(*attr));
  return api->query_port_compat(ctx, port, reinterpret_cast<_compat_ibv_port_attr*>(attr));
}

void ibverbs_set_library_for_testing(const std::string& soname) {
  LoaderState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.soname = soname;
  s.tried = false;
  s.ok = false;
}

}  // namespace uccl
