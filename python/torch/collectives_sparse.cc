// all_reduce of a sparse COO tensor, with Gloo's semantics (what DDP's sparse gradients, e.g.
// nn.Embedding(sparse=True), and torch's own distributed tests expect of a CPU backend):
// ReduceOp.SUM only, and every rank ends with the same coalesced sum in the caller's tensor.
//
// How: each rank coalesces its tensor, the ranks' nnz are gathered (a one-element all_gather the
// caller waits for: the next step's sizes depend on it), then every rank's indices and values
// are gathered with uccl's all_gather_v (the nnz differ) and each rank sums the union
// (torch's coalesce) into the caller's tensor when the work completes. The data is the same on
// every rank and coalesce is deterministic, so the result is bitwise identical everywhere.
// Gathering costs world x nnz on every rank, as Gloo's does; a sparse tensor dense enough for
// that to hurt is better reduced dense.
//
// Only the host's sparse tensors: a CUDA sparse tensor is refused with a clear error.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend.h"
#include "collective_checks.h"
#include "convert.h"

namespace uccl_torch {

using c10d::OpType;

c10::intrusive_ptr<c10d::Work> UcclBackend::allreduce_sparse(at::Tensor& t, const c10d::AllreduceOptions& opts) {
  const char* op = "all_reduce";
  TORCH_CHECK_NOT_IMPLEMENTED(t.device().is_cpu(), "uccl ", op, ": sparse tensors are reduced on the host only; ",
                              "this one is on ", t.device(), " (move it to the CPU, or reduce it dense)");
  TORCH_CHECK_VALUE(opts.reduceOp == c10d::ReduceOp::SUM, "uccl ", op,
                    ": sparse tensors reduce with ReduceOp.SUM only (as with Gloo)");
  const at::Tensor in = t.coalesce();
  const at::Tensor idx = in._indices().contiguous();  // [sparse_dim, nnz], int64
  const at::Tensor val = in._values().contiguous();   // [nnz, dense sizes...]
  const int64_t sparse_dim = in.sparse_dim();
  std::vector<int64_t> dense_sizes(val.sizes().begin() + 1, val.sizes().end());
  int64_t row = 1;  // elements per value (from the sizes: a rank with no entries has the same rows)
  for (int64_t d : dense_sizes) row *= d;

  // What every rank's tensor must agree on (its sizes and sparse_dim; the dtype is checked by the
  // values' gather): indices from a tensor of another shape would index out of this one.
  uint64_t shape_print = 1469598103934665603ull;  // FNV-1a over sparse_dim and the sizes
  std::vector<int64_t> shape_words{sparse_dim};
  for (int64_t d : t.sizes()) shape_words.push_back(d);
  for (int64_t word : shape_words) {
    for (int b = 0; b < 8; ++b) {
      shape_print ^= (static_cast<uint64_t>(word) >> (8 * b)) & 0xff;
      shape_print *= 1099511628211ull;
    }
  }

  std::lock_guard<std::recursive_mutex> lk(issue_mutex());
  // 1. Every rank's nnz and shape (waited for here: the gathers below are sized by it).
  const std::vector<int64_t> head_words{in._nnz(), static_cast<int64_t>(shape_print)};
  at::Tensor head_mine = at::tensor(head_words, at::kLong);
  at::Tensor head_all = at::empty({2 * size_}, at::kLong);
  {
    auto w0 = make_work(OpType::ALLGATHER, "all_reduce (sparse: every rank's nnz and shape)", {head_all}, opts.timeout);
    uccl::AllGatherArgs a;
    a.send = head_mine.data_ptr();
    a.recv = head_all.data_ptr();
    a.count = 2;
    a.dtype = uccl::DataType::kInt64;
    add_op(*w0, comm(op).all_gather(a));
    w0->keep_alive(head_mine);
    launch(w0)->wait();  // throws the op's error (DistBackendError naming the peer)
  }
  // Estimating (_time_estimator): nothing was gathered; every rank is taken to have as many
  // nonzeros as this one.
  if (estimating()) {
    int64_t* all = head_all.data_ptr<int64_t>();
    for (int r = 0; r < size_; ++r) std::copy(head_words.begin(), head_words.end(), all + 2 * r);
  }
  const int64_t* head = head_all.data_ptr<int64_t>();
  std::vector<int64_t> nnz;
  for (int r = 0; r < size_; ++r) {
    TORCH_CHECK_VALUE(head[2 * r + 1] == static_cast<int64_t>(shape_print), "uccl ", op, ": rank ", r,
                      "'s sparse tensor differs from this rank's in its sizes or sparse_dim (here: sizes ",
                      t.sizes(), ", sparse_dim ", sparse_dim, ")");
    nnz.push_back(head[2 * r]);
  }
  TORCH_CHECK(nnz[rank_] == in._nnz(), "uccl ", op, ": internal: own nnz read back as ", nnz[rank_]);
  int64_t total = 0;
  for (int64_t n : nnz) total += n;

  // 2. Every rank's indices and values, rank by rank, in one work.
  auto w = make_work(OpType::ALLREDUCE, op, {t}, opts.timeout);
  at::Tensor all_idx = at::empty({sparse_dim * total}, idx.options());
  at::Tensor all_val = at::empty({total * row}, val.options());
  auto gather = [&](const at::Tensor& mine, at::Tensor& all, int64_t per_nnz) {
    Wire wire = move_wire(mine.scalar_type());
    uccl::AllGatherVArgs a;
    a.send = mine.data_ptr();
    a.recv = all.data_ptr();
    for (int64_t n : nnz) a.recv_counts.push_back(wire.count(n * per_nnz));
    a.recv_displs = packed_displs(a.recv_counts);
    a.dtype = wire.dtype;
    add_op(*w, comm(op).all_gather_v(a));
  };
  gather(idx, all_idx, sparse_dim);
  gather(val, all_val, row);
  for (const at::Tensor& k : {idx, val, all_idx, all_val}) w->keep_alive(k);

  // 3. The sum, into the caller's tensor, once both gathers are done. Rank r's indices arrive as
  // its own [sparse_dim, nnz_r] block; the union is those blocks side by side.
  std::vector<int64_t> sizes = t.sizes().vec();
  w->add_epilogue([t, all_idx, all_val, nnz, sparse_dim, dense_sizes, sizes, total]() mutable {
    std::vector<at::Tensor> blocks;
    int64_t off = 0;
    for (int64_t n : nnz) {
      blocks.push_back(all_idx.narrow(0, off * sparse_dim, n * sparse_dim).view({sparse_dim, n}));
      off += n;
    }
    std::vector<int64_t> val_sizes{total};
    val_sizes.insert(val_sizes.end(), dense_sizes.begin(), dense_sizes.end());
    at::Tensor sum =
        at::sparse_coo_tensor(at::cat(blocks, 1), all_val.view(val_sizes), sizes, t.options()).coalesce();
    at::NoGradGuard no_grad;  // below autograd, as copy_back (convert.h)
    t.copy_(sum);
  });
  return launch(w);
}

}  // namespace uccl_torch
