// Collectives of UcclBackend that move data without reducing it: broadcast, all_gather (list,
// base, coalesced), gather, scatter, all_to_all (single and list), and barrier. Staging as in
// collectives.cc.
#include <string>
#include <vector>

#include "backend.h"
#include "collective_checks.h"
#include "convert.h"
#include "staging.h"

namespace uccl_torch {

using c10d::OpType;

c10::intrusive_ptr<c10d::Work> UcclBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                      const c10d::BroadcastOptions& opts) {
  check_single(tensors.size(), "broadcast", "tensor");
  check_root(opts.rootRank, size_, "broadcast");
  at::Tensor& t = tensors[0];
  check_tensor(t, "broadcast", "tensor");
  Wire wire = move_wire(t.scalar_type());
  std::lock_guard<std::recursive_mutex> lk(issue_mutex());
  auto w = make_work(OpType::BROADCAST, "broadcast", tensors, opts.timeout);
  at::Tensor buf = out_buf(*w, t, opts.rootRank == rank_);
  uccl::BroadcastArgs a;
  a.send = a.recv = buf.data_ptr();
  a.count = wire.count(t.numel());
  a.dtype = wire.dtype;
  a.root = static_cast<int>(opts.rootRank);
  a.stream = w->stream();  // set by in_buf/out_buf/pack for device tensors
  add_op(*w, comm("broadcast").broadcast(a));
  return launch(w);
}

// all_gather into a list: one flat receive buffer, copied out per rank. Uneven sizes (allowed
// by NCCL, refused by gloo) use uccl's all_gather_v.
static void check_allgather_list(const UcclBackend& b, const std::vector<at::Tensor>& outs, const at::Tensor& in,
                                 const char* op) {
  const int rank = b.getRank();
  check_tensor(in, op, "input");
  check_list(outs, b.getSize(), in.scalar_type(), op, "output_tensor_list", "the input");
  TORCH_CHECK_VALUE(outs[rank].numel() == in.numel(), "uccl ", op, ": output_tensor_list[", rank, "] has ",
                    outs[rank].numel(), " elements but the input has ", in.numel());
}

// Checked by check_allgather_list first (so that nothing is issued for a bad call).
static void issue_allgather_list(UcclBackend& b, UcclWork& w, std::vector<at::Tensor>& outs, const at::Tensor& in,
                                 const char* op) {
  Wire wire = move_wire(in.scalar_type());
  at::Tensor send = in_buf(w, in);
  at::Tensor flat = pack(w, outs, in, false);
  unpack_after(w, flat, outs);
  if (same_numel(outs)) {
    uccl::AllGatherArgs a;
    a.send = send.data_ptr();
    a.recv = flat.data_ptr();
    a.count = wire.count(in.numel());
    a.dtype = wire.dtype;
    a.stream = w.stream();  // set by in_buf/out_buf/pack for device tensors
    b.add_op(w, b.comm(op).all_gather(a));
  } else {
    uccl::AllGatherVArgs a;
    a.send = send.data_ptr();
    a.recv = flat.data_ptr();
    a.recv_counts = wire_counts(wire, outs);
    a.recv_displs = packed_displs(a.recv_counts);
    a.dtype = wire.dtype;
    a.stream = w.stream();  // set by in_buf/out_buf/pack for device tensors
    b.add_op(w, b.comm(op).all_gather_v(a));
  }
}

c10::intrusive_ptr<c10d::Work> UcclBackend::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                      std::vector<at::Tensor>& inputs,
                                                      const c10d::AllgatherOptions& opts) {
  check_single(inputs.size(), "all_gather", "input tensor");
  check_single(outputs.size(), "all_gather", "output list");
  check_allgather_list(*this, outputs[0], inputs[0], "all_gather");
  std::lock_guard<std::recursive_mutex> lk(issue_mutex());
  auto w = make_work(OpType::ALLGATHER, "all_gather", outputs[0], opts.timeout);
  issue_allgather_list(*this, *w, outputs[0], inputs[0], "all_gather");
  return launch(w);
}

c10::intrusive_ptr<c10d::Work> UcclBackend::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                std::vector<at::Tensor>& inputs,
                                                                const c10d::AllgatherOptions& opts) {
  // torch's layout (gloo's too): outputs[r][i] receives input i of rank r, so there is one
  // output list per rank, each as long as the inputs. Each input is gathered on its own into
  // the column outputs[*][i].
  const char* op = "all_gather_coalesced";
  TORCH_CHECK_VALUE(static_cast<int>(outputs.size()) == size_, "uccl ", op, ": ", outputs.size(),
                    " output lists but the group has ", size_, " ranks (output_tensor_lists[r] receives rank r's inputs)");
  for (size_t r = 0; r < outputs.size(); ++r) {
    TORCH_CHECK_VALUE(outputs[r].size() == inputs.size(), "uccl ", op, ": output_tensor_lists[", r, "] has ",
                      outputs[r].size(), " tensors but there are ", inputs.size(), " inputs");
  }
  std::vector<std::vector<at::Tensor>> columns(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    for (auto& l : outputs) columns[i].push_back(l[i]);
    check_allgather_list(*this, columns[i], inputs[i], op);
  }
  std::vector<at::Tensor> flat_outputs;
  for (auto& l : outputs) flat_outputs.insert(flat_outputs.end(), l.begin(), l.end());
  std::lock_guard<std::recursive_mutex> lk(issue_mutex());
  auto w = make_work(OpType::ALLGATHER_COALESCED, op, flat_outputs, opts.timeout);
  for (size_t i = 0; i < inputs.size(); ++i) issue_allgather_list(*this, *w, columns[i], inputs[i], op);
  return launch(w);
}

c10::intrusive_ptr<c10d::Work> UcclBackend::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                            const c10d::AllgatherOptions& opts) {
  std::vector<at::Tensor> outs{output}, ins{input};
  return allgather_into_tensor_coalesced(outs, ins, opts);
}

c10::intrusive_ptr<c10d::Work> UcclBackend::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                            std::vector<at::Tensor>& inputs,
                                                                            const c10d::AllgatherOptions& opts) {
  const char* op = outputs.size() == 1 ? "all_gather_into_tensor" : "all_gather_into_tensor_coalesced";
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "uccl ", op, ": ", outputs.size(), " outputs but ",
                    inputs.size(), " inputs");
  for (size_t i = 0; i < outputs.size(); ++i) {
    check_tensor(outputs[i], op, "output " + std::to_string(i));
    check_tensor(inputs[i], op, "input " + std::to_string(i));
    check_same_dtype(outputs[i], inputs[i].scalar_type(), op, "output " + std::to_string(i), "the input");
    TORCH_CHECK_VALUE(outputs[i].numel() == inputs[i].numel() * size_, "uccl ", op, ": output ", i, " has ",
                      outputs[i].numel(), " elements; expected input numel (", inputs[i].numel(),
                      ") x group size (", size_, ")");
  }
  std::lock_guard<std::recursive_mutex> lk(issue_mutex());
  auto w = make_work(outputs.size() == 1 ? OpType::_ALLGATHER_BASE : OpType::COALESCED, op, outputs, opts.timeout);
  for (size_t i = 0; i < outputs.size(); ++i) {
    Wire wire = move_wire(inputs[i].scalar_type());
    at::Tensor recv = out_buf(*w, outputs[i], false);
    // In place when the input is this rank's slot of the output.
    at::Tensor send = is_slot_of(inputs[i], recv, rank_) ? inputs[i] : in_buf(*w, inputs[i]);
    uccl::AllGatherArgs a;
    a.send = send.data_ptr();
    a.recv = recv.data_ptr();
    a.count = wire.count(inputs[i].numel());
    a.dtype = wire.dtype;
    a.stream = w->stream();  // set by in_buf/out_buf/pack for device tensors
    add_op(*w, comm(op).all_gather(a));
  }
  return launch(w);
}

c10::intrusive_ptr<c10d::Work> UcclBackend::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                   std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  const char* op = "gather";
  check_single(inputs.size(), op, "input tensor");
  check_root(opts.rootRank, size_, op);
  at::Tensor& in = inputs[0];
  check_tensor(in, op, "input");
  bool root = opts.rootRank == rank_;
  std::vector<at::Tensor> outs;
  if (root) {
    check_single(outputs.size(), op, "gather_list");
    outs = outputs[0];
    check_list(outs, size_, in.scalar_type(), op, "gather_list", "the input");
    for (size_t i = 0; i < outs.size(); ++i) {
      TORCH_CHECK_VALUE(outs[i].numel() == in.numel(), "uccl gather: gather_list[", i, "] has ", outs[i].numel(),
                        " elements but the input has ", in.numel(), " (all ranks must send the same size)");
    }
  } else {
    TORCH_CHECK_VALUE(outputs.empty() || outputs[0].empty(), "uccl gather: gather_list given on rank ", rank_,
                      " but only the root (rank ", opts.rootRank, ") receives");
  }
  Wire wire = move_wire(in.scalar_type());
  std::lock_guard<std::recursive_mutex> lk(issue_mutex());
  auto w = make_work(OpType::GATHER, op, outs, opts.timeout);
  uccl::GatherArgs a;
  a.send = in_buf(*w, in).data_ptr();
  if (root) {
    at::Tensor flat = pack(*w, outs, in, false);
    unpack_after(*w, flat, outs);
    a.recv = flat.data_ptr();
  }
  a.count = wire.count(in.numel());
  a.dtype = wire.dtype;
  a.root = static_cast<int>(opts.rootRank);
  a.stream = w->stream();  // set by in_buf/out_buf/pack for device tensors
  add_op(*w, comm(op).gather(a));
  return launch(w);
}

c10::intrusive_ptr<c10d::Work> UcclBackend::scatter(std::vector<at::Tensor>& outputs,
                                                    std::vector<std::vector<at::Tensor>>& inputs,
                                                    const c10d::ScatterOptions& opts) {
  const char* op = "scatter";
  check_single(outputs.size(), op, "output tensor");
  check_root(opts.rootRank, size_, op);
  at::Tensor& out = outputs[0];
  check_tensor(out, op, "output");
  bool root = opts.rootRank == rank_;
  if (root) {
    check_single(inputs.size(), op, "scatter_list");
    check_list(inputs[0], size_, out.scalar_type(), op, "scatter_list", "the output");
    for (size_t i = 0; i < inputs[0].size(); ++i) {
      TORCH_CHECK_VALUE(inputs[0][i].numel() == out.numel(), "uccl scatter: scatter_list[", i, "] has ",
                        inputs[0][i].numel(), " elements but the output has ", out.numel());
    }
  } else {
    TORCH_CHECK_VALUE(inputs.empty() || inputs[0].empty(), "uccl scatter: scatter_list given on rank ", rank_,
                      " but only the root (rank ", opts.rootRank, ") sends");
  }
  Wire wire = move_wire(out.scalar_type());
  std::lock_guard<std::recursive_mutex> lk(issue_mutex());
  auto w = make_work(OpType::SCATTER, op, outputs, opts.timeout);
  uccl::ScatterArgs a;
  if (root) a.send = pack(*w, inputs[0], out, true).data_ptr();
  a.recv = out_buf(*w, out, false).data_ptr();
  a.count = wire.count(out.numel());
  a.dtype = wire.dtype;
  a.root = static_cast<int>(opts.rootRank);
  a.stream = w->stream();  // set by in_buf/out_buf/pack for device tensors
  add_op(*w, comm(op).scatter(a));
  return launch(w);
}

// Split sizes of all_to_all_single, in rows of dim 0 (empty = equal split), as element counts.
static std::vector<size_t> split_counts(const at::Tensor& t, const std::vector<int64_t>& splits, int size,
                                        const Wire& wire, const char* side) {
  int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  int64_t row_elems = 1;
  for (int64_t d = 1; d < t.dim(); ++d) row_elems *= t.size(d);
  std::vector<size_t> counts;
  if (splits.empty()) {
    TORCH_CHECK_VALUE(rows % size == 0, "uccl all_to_all_single: ", side, " dim 0 (", rows,
                      ") is not divisible by the group size (", size, "); pass ", side, "_split_sizes");
    counts.assign(size, wire.count((rows / size) * row_elems));
    return counts;
  }
  TORCH_CHECK_VALUE(static_cast<int>(splits.size()) == size, "uccl all_to_all_single: ", side, "_split_sizes has ",
                    splits.size(), " entries but the group has ", size, " ranks");
  int64_t sum = 0;
  for (auto s : splits) {
    TORCH_CHECK_VALUE(s >= 0, "uccl all_to_all_single: negative entry in ", side, "_split_sizes");
    sum += s;
    counts.push_back(wire.count(s * row_elems));
  }
  TORCH_CHECK_VALUE(sum == rows, "uccl all_to_all_single: ", side, "_split_sizes sum to ", sum, " but the ", side,
                    " has ", rows, " rows in dim 0");
  return counts;
}

c10::intrusive_ptr<c10d::Work> UcclBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                          std::vector<int64_t>& output_splits,
                                                          std::vector<int64_t>& input_splits,
                                                          const c10d::AllToAllOptions& opts) {
  const char* op = "all_to_all_single";
  check_tensor(output, op, "output");
  check_tensor(input, op, "input");
  check_same_dtype(output, input.scalar_type(), op, "output", "the input");
  Wire wire = move_wire(input.scalar_type());
  auto send_counts = split_counts(input, input_splits, size_, wire, "input");
  auto recv_counts = split_counts(output, output_splits, size_, wire, "output");
  std::lock_guard<std::recursive_mutex> lk(issue_mutex());
  auto w = make_work(OpType::ALLTOALL_BASE, op, {output}, opts.timeout);
  at::Tensor send = in_buf(*w, input);
  at::Tensor recv = out_buf(*w, output, false);
  bool even = input_splits.empty() && output_splits.empty() && send_counts == recv_counts;
  if (even) {
    uccl::AllToAllArgs a;
    a.send = send.data_ptr();
    a.recv = recv.data_ptr();
    a.count = send_counts.empty() ? 0 : send_counts[0];
    a.dtype = wire.dtype;
    a.stream = w->stream();  // set by in_buf/out_buf/pack for device tensors
    add_op(*w, comm(op).all_to_all(a));
  } else {
    uccl::AllToAllVArgs a;
    a.send = send.data_ptr();
    a.recv = recv.data_ptr();
    a.send_displs = packed_displs(send_counts);
    a.recv_displs = packed_displs(recv_counts);
    a.send_counts = std::move(send_counts);
    a.recv_counts = std::move(recv_counts);
    a.dtype = wire.dtype;
    a.stream = w->stream();  // set by in_buf/out_buf/pack for device tensors
    add_op(*w, comm(op).all_to_all_v(a));
  }
  return launch(w);
}

c10::intrusive_ptr<c10d::Work> UcclBackend::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                                     const c10d::AllToAllOptions& opts) {
  const char* op = "all_to_all";
  TORCH_CHECK_VALUE(!inputs.empty(), "uccl all_to_all: empty input_tensor_list");
  at::ScalarType dtype = inputs[0].scalar_type();
  check_list(inputs, size_, dtype, op, "input_tensor_list", "input_tensor_list[0]");
  check_list(outputs, size_, dtype, op, "output_tensor_list", "input_tensor_list[0]");
  Wire wire = move_wire(dtype);
  std::lock_guard<std::recursive_mutex> lk(issue_mutex());
  auto w = make_work(OpType::ALLTOALL, op, outputs, opts.timeout);
  at::Tensor send = pack(*w, inputs, inputs[0], true);
  at::Tensor recv = pack(*w, outputs, inputs[0], false);
  unpack_after(*w, recv, outputs);
  uccl::AllToAllVArgs a;
  a.send = send.data_ptr();
  a.recv = recv.data_ptr();
  a.send_counts = wire_counts(wire, inputs);
  a.recv_counts = wire_counts(wire, outputs);
  a.send_displs = packed_displs(a.send_counts);
  a.recv_displs = packed_displs(a.recv_counts);
  a.dtype = wire.dtype;
  a.stream = w->stream();  // set by in_buf/out_buf/pack for device tensors
  add_op(*w, comm(op).all_to_all_v(a));
  return launch(w);
}

c10::intrusive_ptr<c10d::Work> UcclBackend::barrier(const c10d::BarrierOptions& opts) {
  std::lock_guard<std::recursive_mutex> lk(issue_mutex());
  auto w = make_work(OpType::BARRIER, "barrier", {}, opts.timeout);
  add_op(*w, comm("barrier").barrier());
  // Covers device work as ProcessGroupNCCL's barrier does: once every rank arrived (and every
  // earlier op of this group completed: uccl completes in issue order), wait() synchronizes
  // the caller's current stream of the device this group last used in place.
  if (last_device_) w->sync_stream_after_wait(*last_device_);
  return launch(w);
}

}  // namespace uccl_torch
