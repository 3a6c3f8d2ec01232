// Checks and counts shared by the collectives of UcclBackend (collectives.cc: the reductions;
// collectives_move.cc: broadcast, all_gather, gather, scatter, all_to_all, barrier).
//
// Internal to the torch extension. The checks throw c10::ValueError (TORCH_CHECK_VALUE) naming
// the op and the argument, so a bad call is refused before anything is issued.
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "convert.h"

namespace uccl_torch {

inline bool same_numel(const std::vector<at::Tensor>& ts) {
  for (auto& t : ts) {
    if (t.numel() != ts.front().numel()) return false;
  }
  return true;
}

inline std::vector<size_t> wire_counts(const Wire& wire, const std::vector<at::Tensor>& ts) {
  std::vector<size_t> c;
  for (auto& t : ts) c.push_back(wire.count(t.numel()));
  return c;
}

inline std::vector<size_t> packed_displs(const std::vector<size_t>& counts) {
  std::vector<size_t> d(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
  return d;
}

// Checks a per-rank list (all_gather's output list, scatter's input list, ...).
inline void check_list(const std::vector<at::Tensor>& ts, int size, at::ScalarType dtype, const char* op,
                       const char* name, const char* ref) {
  TORCH_CHECK_VALUE(static_cast<int>(ts.size()) == size, "uccl ", op, ": ", name, " has ", ts.size(),
                    " tensors but the group has ", size, " ranks");
  for (size_t i = 0; i < ts.size(); ++i) {
    std::string what = std::string(name) + "[" + std::to_string(i) + "]";
    check_tensor(ts[i], op, what);
    check_same_dtype(ts[i], dtype, op, what, ref);
  }
}

inline void check_root(int64_t root, int size, const char* op) {
  TORCH_CHECK_VALUE(root >= 0 && root < size, "uccl ", op, ": root rank ", root, " is outside the group of size ",
                    size);
}

// True when `part` is exactly slot `index` (of part.numel() elements) of contiguous `whole`:
// torch's in-place all_gather_into_tensor / reduce_scatter_tensor pass such views.
inline bool is_slot_of(const at::Tensor& part, const at::Tensor& whole, int index) {
  return part.is_cpu() && whole.is_cpu() && part.is_contiguous() && whole.is_contiguous() && part.numel() > 0 &&
         static_cast<const char*>(part.data_ptr()) ==
             static_cast<const char*>(whole.data_ptr()) + index * part.numel() * part.element_size();
}

}  // namespace uccl_torch
