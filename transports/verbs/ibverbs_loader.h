// libibverbs, opened with dlopen() at run time.
//
// Why: one uccl build must import and run on hosts without rdma-core (laptops, CI, the TCP-only
// part of a heterogeneous cluster). libuccl.so therefore has no link-time dependency on
// libibverbs: every exported ibv_* function that the transport calls goes through this table.
// The data-path calls ibv_post_send / ibv_post_recv / ibv_poll_cq are static inline in verbs.h
// and jump through the context's ops table, so they work unchanged once a context exists.
// Never call an exported ibv_* function directly (nor the inline wrappers that fall back to
// one, such as ibv_query_port or ibv_reg_mr): `nm -D --undefined-only libuccl.so | grep ibv_`
// must stay empty. That is checked by tests/verbs/run_vm_tests.sh.
#pragma once

#include <infiniband/verbs.h>

#include <string>

namespace uccl {

// Members are named without the ibv_ prefix on purpose: verbs.h defines function-like macros
// for some of the ibv_ names (ibv_query_port, ibv_reg_mr), which would rewrite a member access.
struct IbvApi {
  ibv_device** (*get_device_list)(int* num_devices);
  void (*free_device_list)(ibv_device** list);
  const char* (*get_device_name)(ibv_device* device);
  ibv_context* (*open_device)(ibv_device* device);
  int (*close_device)(ibv_context* context);
  int (*query_device)(ibv_context* context, ibv_device_attr* attr);
  // The exported (compat) symbol; use verbs_query_port() below, which prefers the context op.
  int (*query_port_compat)(ibv_context* context, uint8_t port, struct _compat_ibv_port_attr* attr);
  int (*query_gid)(ibv_context* context, uint8_t port, int index, ibv_gid* gid);
  ibv_pd* (*alloc_pd)(ibv_context* context);
  int (*dealloc_pd)(ibv_pd* pd);
  ibv_mr* (*reg_mr)(ibv_pd* pd, void* addr, size_t length, int access);
  int (*dereg_mr)(ibv_mr* mr);
  ibv_cq* (*create_cq)(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel,
                       int comp_vector);
  int (*destroy_cq)(ibv_cq* cq);
  ibv_qp* (*create_qp)(ibv_pd* pd, ibv_qp_init_attr* attr);
  int (*modify_qp)(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask);
  int (*destroy_qp)(ibv_qp* qp);
  const char* (*wc_status_str)(ibv_wc_status status);
};

// The loaded table, or nullptr with the reason in *why (dlopen/dlsym error text).
// Thread safe; the library is opened once and never closed.
const IbvApi* ibverbs(std::string* why = nullptr);

// ibv_query_port without the inline fallback's reference to the exported symbol.
int verbs_query_port(const IbvApi* api, ibv_context* ctx, uint8_t port, ibv_port_attr* attr);

// Test hook: the next ibverbs() call dlopens `soname` instead of "libibverbs.so.1" (forgetting
// a previous result). Only for tests that simulate a host without rdma-core.
void ibverbs_set_library_for_testing(const std::string& soname);

}  // namespace uccl
