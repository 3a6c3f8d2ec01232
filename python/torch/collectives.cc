// Collectives of UcclBackend that reduce (all_reduce and its coalesced form, reduce, reduce_scatter
// and its forms): check the tensors, stage them, issue uccl ops, return the work. The others
// (broadcast, all_gather, gather, scatter, all_to_all, barrier): collectives_move.cc; all_reduce
// of a sparse COO tensor: collectives_sparse.cc.
//
// Staging rule: uccl wants one contiguous buffer per side. A contiguous caller tensor is used
// as is; otherwise (or for lists of tensors) a contiguous buffer is used and outputs are copied
// back by an epilogue that runs only on success.
#include <string>
#include <type_traits>
#include <vector>

#include "backend.h"
#include "collective_checks.h"
#include "convert.h"
#include "staging.h"

namespace uccl_torch {

using c10d::OpType;

// OpType::REDUCE_SCATTER_TENSOR_COALESCED where this torch has it (2.13 does, 2.11 does not),
// else OpType::COALESCED: only the Work's op type (profiling, logs) differs.
template <class T, class = void>
struct ReduceScatterCoalesced {
  static constexpr T value = T::COALESCED;
};
template <class T>
struct ReduceScatterCoalesced<T, std::void_t<decltype(T::REDUCE_SCATTER_TENSOR_COALESCED)>> {
  static constexpr T value = T::REDUCE_SCATTER_TENSOR_COALESCED;
};

c10::intrusive_ptr<c10d::Work> UcclBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                      const c10d::AllreduceOptions& opts) {
  check_single(tensors.size(), "all_reduce", "tensor");
  if (tensors[0].defined() && tensors[0].is_sparse()) return allreduce_sparse(tensors[0], opts);
  c10d::AllreduceCoalescedOptions co;
  co.reduceOp = opts.reduceOp;
  co.timeout = opts.timeout;
  return allreduce_coalesced(tensors, co);
}

c10::intrusive_ptr<c10d::Work> UcclBackend::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                const c10d::AllreduceCoalescedOptions& opts) {
  const char* op = tensors.size() == 1 ? "all_reduce" : "all_reduce_coalesced";
  std::vector<ReduceWire> rws;
  for (size_t i = 0; i < tensors.size(); ++i) {
    check_tensor(tensors[i], op, "tensor " + std::to_string(i));
    rws.push_back(reduce_wire(tensors[i].scalar_type(), opts.reduceOp, op));
  }
  std::lock_guard<std::recursive_mutex> lk(issue_mutex());
  auto w = make_work(tensors.size() == 1 ? OpType::ALLREDUCE : OpType::ALLREDUCE_COALESCED, op, tensors, opts.timeout);
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (issue_staged_chunks(*this, *w, tensors[i], rws[i], op)) continue;
    at::Tensor buf = out_buf(*w, tensors[i], true);
    uccl::AllReduceArgs a;
    a.send = a.recv = buf.data_ptr();
    a.count = rws[i].wire.count(buf.numel());
    a.dtype = rws[i].wire.dtype;
    a.op = rws[i].op;
    a.scalar = rws[i].scalar;
    a.stream = w->stream();  // set by in_buf/out_buf/pack for device tensors
    add_op(*w, comm(op).all_reduce(a));
  }
  return launch(w);
}

c10::intrusive_ptr<c10d::Work> UcclBackend::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  check_single(tensors.size(), "reduce", "tensor");
  check_root(opts.rootRank, size_, "reduce");
  at::Tensor& t = tensors[0];
  check_tensor(t, "reduce", "tensor");
  ReduceWire rw = reduce_wire(t.scalar_type(), opts.reduceOp, "reduce");
  std::lock_guard<std::recursive_mutex> lk(issue_mutex());
  auto w = make_work(OpType::REDUCE, "reduce", tensors, opts.timeout);
  bool root = opts.rootRank == rank_;
  // Off the root the tensor is only read: no copy back, and uccl gets no recv buffer.
  at::Tensor buf = root ? out_buf(*w, t, true) : in_buf(*w, t);
  uccl::ReduceArgs a;
  a.send = buf.data_ptr();
  a.recv = root ? buf.data_ptr() : nullptr;
  a.count = rw.wire.count(t.numel());
  a.dtype = rw.wire.dtype;
  a.op = rw.op;
  a.scalar = rw.scalar;
  a.root = static_cast<int>(opts.rootRank);
  a.stream = w->stream();  // set by in_buf/out_buf/pack for device tensors
  add_op(*w, comm("reduce").reduce(a));
  return launch(w);
}

c10::intrusive_ptr<c10d::Work> UcclBackend::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                           std::vector<std::vector<at::Tensor>>& inputs,
                                                           const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter";
  check_single(outputs.size(), op, "output tensor");
  check_single(inputs.size(), op, "input list");
  at::Tensor& out = outputs[0];
  check_tensor(out, op, "output");
  check_list(inputs[0], size_, out.scalar_type(), op, "input_list", "the output");
  const auto& ins = inputs[0];
  TORCH_CHECK_VALUE(ins[rank_].numel() == out.numel(), "uccl ", op, ": input_list[", rank_, "] has ",
                    ins[rank_].numel(), " elements but the output has ", out.numel(),
                    " (this rank receives the reduction of input_list[rank])");
  ReduceWire rw = reduce_wire(out.scalar_type(), opts.reduceOp, op);
  std::lock_guard<std::recursive_mutex> lk(issue_mutex());
  auto w = make_work(OpType::REDUCE_SCATTER, op, outputs, opts.timeout);
  at::Tensor flat = pack(*w, ins, out, true);
  at::Tensor buf = out_buf(*w, out, false);
  if (same_numel(ins)) {
    uccl::ReduceScatterArgs a;
    a.send = flat.data_ptr();
    a.recv = buf.data_ptr();
    a.count = rw.wire.count(out.numel());
    a.dtype = rw.wire.dtype;
    a.op = rw.op;
    a.scalar = rw.scalar;
    a.stream = w->stream();  // set by in_buf/out_buf/pack for device tensors
    add_op(*w, comm(op).reduce_scatter(a));
  } else {
    uccl::ReduceScatterVArgs a;
    a.send = flat.data_ptr();
    a.recv = buf.data_ptr();
    a.recv_counts = wire_counts(rw.wire, ins);
    a.dtype = rw.wire.dtype;
    a.op = rw.op;
    a.scalar = rw.scalar;
    a.stream = w->stream();  // set by in_buf/out_buf/pack for device tensors
    add_op(*w, comm(op).reduce_scatter_v(a));
  }
  return launch(w);
}

c10::intrusive_ptr<c10d::Work> UcclBackend::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                 const c10d::ReduceScatterOptions& opts) {
  std::vector<at::Tensor> outs{output}, ins{input};
  return reduce_scatter_tensor_coalesced(outs, ins, opts);
}

c10::intrusive_ptr<c10d::Work> UcclBackend::reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                            std::vector<at::Tensor>& inputs,
                                                                            const c10d::ReduceScatterOptions& opts) {
  const char* op = outputs.size() == 1 ? "reduce_scatter_tensor" : "reduce_scatter_tensor_coalesced";
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "uccl ", op, ": ", outputs.size(), " outputs but ",
                    inputs.size(), " inputs");
  std::vector<ReduceWire> rws;
  for (size_t i = 0; i < outputs.size(); ++i) {
    check_tensor(outputs[i], op, "output " + std::to_string(i));
    check_tensor(inputs[i], op, "input " + std::to_string(i));
    check_same_dtype(inputs[i], outputs[i].scalar_type(), op, "input " + std::to_string(i), "the output");
    TORCH_CHECK_VALUE(inputs[i].numel() == outputs[i].numel() * size_, "uccl ", op, ": input ", i, " has ",
                      inputs[i].numel(), " elements; expected output numel (", outputs[i].numel(),
                      ") x group size (", size_, ")");
    rws.push_back(reduce_wire(outputs[i].scalar_type(), opts.reduceOp, op));
  }
  std::lock_guard<std::recursive_mutex> lk(issue_mutex());
  auto w = make_work(outputs.size() == 1 ? OpType::_REDUCE_SCATTER_BASE : ReduceScatterCoalesced<OpType>::value, op,
                     outputs, opts.timeout);
  for (size_t i = 0; i < outputs.size(); ++i) {
    at::Tensor send = in_buf(*w, inputs[i]);
    // In place when the output is this rank's slot of the input (uccl allows recv == send + rank*count).
    at::Tensor recv = is_slot_of(outputs[i], send, rank_) ? outputs[i] : out_buf(*w, outputs[i], false);
    uccl::ReduceScatterArgs a;
    a.send = send.data_ptr();
    a.recv = recv.data_ptr();
    a.count = rws[i].wire.count(outputs[i].numel());
    a.dtype = rws[i].wire.dtype;
    a.op = rws[i].op;
    a.scalar = rws[i].scalar;
    a.stream = w->stream();  // set by in_buf/out_buf/pack for device tensors
    add_op(*w, comm(op).reduce_scatter(a));
  }
  return launch(w);
}

}  // namespace uccl_torch
