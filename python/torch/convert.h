// Conversions at the torch <-> uccl boundary: dtypes, reduce ops, Status -> exception, and the
// checks every op runs on its tensors. Inline so each op file sees the same rules.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "uccl/communicator.h"
#include "uccl/memory.h"

namespace uccl_torch {

// uccl's own element type for a torch dtype, if it has one.
inline std::optional<uccl::DataType> native_dtype(at::ScalarType t) {
  switch (t) {
    case at::kChar: return uccl::DataType::kInt8;
    case at::kByte: return uccl::DataType::kUint8;
    case at::kInt: return uccl::DataType::kInt32;
    case at::kLong: return uccl::DataType::kInt64;
    case at::kHalf: return uccl::DataType::kFloat16;
    case at::kBFloat16: return uccl::DataType::kBFloat16;
    case at::kFloat: return uccl::DataType::kFloat32;
    case at::kDouble: return uccl::DataType::kFloat64;
    default: return std::nullopt;
  }
}

// How one torch element travels: as `per_elem` uccl elements of `dtype`.
struct Wire {
  uccl::DataType dtype = uccl::DataType::kUint8;
  size_t per_elem = 1;
  size_t count(int64_t numel) const { return static_cast<size_t>(numel) * per_elem; }
};

// Ops that only move data (broadcast, gathers, scatter, all-to-all, p2p) work for every dtype:
// types uccl has no name for (bool, int16, complex, float8, ...) travel as raw bytes. Known
// types keep their name so the Envelope's dtype check still catches mismatched calls.
inline Wire move_wire(at::ScalarType t) {
  if (auto d = native_dtype(t)) return {*d, 1};
  return {uccl::DataType::kUint8, c10::elementSize(t)};
}

struct ReduceWire {
  Wire wire;
  uccl::RedOp op = uccl::RedOp::kSum;
  double scalar = 1.0;
};

// Reductions need a dtype uccl can do arithmetic on. Two torch types are rewritten instead of
// refused: bool (or/and are max/min over 0/1 bytes) and complex (sum-like ops work on the real
// view, torch's own isComplexViewAsRealAllowed rule).
inline ReduceWire reduce_wire(at::ScalarType t, const c10d::ReduceOp& rop, const char* opname) {
  using R = c10d::ReduceOp;
  ReduceWire rw;
  switch (rop.op_) {
    case R::SUM: rw.op = uccl::RedOp::kSum; break;
    case R::AVG: rw.op = uccl::RedOp::kAvg; break;
    case R::PRODUCT: rw.op = uccl::RedOp::kProd; break;
    case R::MIN: rw.op = uccl::RedOp::kMin; break;
    case R::MAX: rw.op = uccl::RedOp::kMax; break;
    case R::PREMUL_SUM: {
      rw.op = uccl::RedOp::kPremulSum;
      // torch only ever attaches a PreMulSumSupplement to PREMUL_SUM (ProcessGroupNCCL casts the same way).
      // Its older name, which newer torch keeps as an alias (torch 2.11 has only this one).
      auto* sup = static_cast<c10d::NCCLPreMulSumSupplement*>(rop.supplement_.get());
      TORCH_CHECK_VALUE(sup != nullptr, "uccl ", opname, ": PREMUL_SUM without a factor; build the op with ",
                        "torch.distributed._make_nccl_premul_sum(factor)");
      // A tensor factor is read once on the host: uccl applies one scalar per operation.
      rw.scalar = sup->tensor_factor.defined() ? sup->tensor_factor.item<double>() : sup->double_factor;
      break;
    }
    case R::BAND:
    case R::BOR:
    case R::BXOR:
      // bool: and/or are min/max over 0/1 bytes (xor over bytes stays 0/1 too); integers: bitwise.
      TORCH_CHECK_VALUE(t == at::kBool || at::isIntegralType(t, /*includeBool=*/false), "uccl ", opname,
                        ": bitwise reductions need integer or bool tensors (got ", t, ")");
      rw.op = rop.op_ == R::BAND ? uccl::RedOp::kBand : rop.op_ == R::BOR ? uccl::RedOp::kBor : uccl::RedOp::kBxor;
      if (t == at::kBool && rw.op != uccl::RedOp::kBxor)
        rw.op = rop.op_ == R::BAND ? uccl::RedOp::kMin : uccl::RedOp::kMax;
      break;
    default:
      TORCH_CHECK_NOT_IMPLEMENTED(false, "uccl ", opname, ": reduce op ", static_cast<int>(rop.op_),
                                  " is not supported");
  }
  if (t == at::kBool) {
    // True+True must stay True: sum/max -> max, prod/min -> min over 0/1 bytes.
    TORCH_CHECK_NOT_IMPLEMENTED(rw.op != uccl::RedOp::kAvg && rw.op != uccl::RedOp::kPremulSum, "uccl ", opname,
                                ": AVG/PREMUL_SUM are not defined for bool tensors");
    if (rw.op == uccl::RedOp::kSum) rw.op = uccl::RedOp::kMax;
    if (rw.op == uccl::RedOp::kProd) rw.op = uccl::RedOp::kMin;
    rw.wire = {uccl::DataType::kUint8, 1};
    return rw;
  }
  if (at::isComplexType(t)) {
    bool sumlike = rw.op == uccl::RedOp::kSum || rw.op == uccl::RedOp::kAvg || rw.op == uccl::RedOp::kPremulSum;
    TORCH_CHECK_NOT_IMPLEMENTED(sumlike, "uccl ", opname, ": ", uccl::redop_name(rw.op),
                                " is not defined for complex tensors (only SUM, AVG, PREMUL_SUM)");
    auto real = native_dtype(c10::toRealValueType(t));
    TORCH_CHECK_NOT_IMPLEMENTED(real.has_value(), "uccl ", opname, ": cannot reduce dtype ", t);
    rw.wire = {*real, 2};
    return rw;
  }
  auto d = native_dtype(t);
  TORCH_CHECK_NOT_IMPLEMENTED(d.has_value(), "uccl ", opname, ": cannot reduce tensors of dtype ", t,
                              " (uccl reduces int8, uint8, int32, int64, float16, bfloat16, float32, float64, "
                              "bool and complex)");
  rw.wire = {*d, 1};
  return rw;
}

// A failed Status as the exception torch users expect: bad input -> ValueError, NotSupported ->
// NotImplementedError, anything about the group (timeout, dead peer, abort, mismatch) ->
// torch.distributed.DistBackendError, carrying uccl's message (it names op, peer and reason).
inline std::exception_ptr to_exception(const uccl::Status& s, const std::string& what) {
  std::string msg = "uccl " + what + " failed: " + s.to_string();
  if (s.peer() >= 0 && msg.find("rank " + std::to_string(s.peer())) == std::string::npos) {
    msg += " (peer rank " + std::to_string(s.peer()) + ")";
  }
  c10::SourceLocation loc{__func__, __FILE__, static_cast<uint32_t>(__LINE__)};
  switch (s.code()) {
    case uccl::Code::kInvalidArgument: return std::make_exception_ptr(c10::ValueError(loc, msg));
    case uccl::Code::kNotSupported: return std::make_exception_ptr(c10::NotImplementedError(loc, msg));
    default: return std::make_exception_ptr(c10::DistBackendError(loc, msg));
  }
}

[[noreturn]] inline void throw_status(const uccl::Status& s, const std::string& what) {
  std::rethrow_exception(to_exception(s, what));
}

// Every tensor an op touches lives in one of three places:
//  * host memory (CPU tensors): used in place;
//  * device memory one of uccl's device backends owns (CUDA where the cuda backend is
//    available; the tests' simulated device): used in place too (device_direct), the op
//    ordered after the work queued on the tensor's current stream, and Work::wait() making the
//    current stream wait instead of the host (ProcessGroupNCCL's semantics);
//  * memory of an accelerator uccl has no backend for (what torch.accelerator reports: xpu,
//    mps, hpu, mtia, a PrivateUse1 device), and CUDA memory uccl cannot use (a uccl built
//    without CUDA or without a driver): staged through host
//    buffers by torch's own copies (the device's copy functions, on its current stream), before
//    the op and back after it (what Gloo does with every CUDA tensor: slower, never refused).
inline bool staged_device(const at::Device& d) {
  switch (d.type()) {
    case at::kCUDA:
    case at::kHIP:
    case at::kXPU:
    case at::kMPS:
    case at::kHPU:
    case at::kMTIA:
    case at::kPrivateUse1: return true;
    default: return false;
  }
}

// Whether a device backend of uccl owns t's memory (contiguous or not; asks its driver).
inline bool device_owned(const at::Tensor& t) {
  return !t.is_cpu() && t.numel() > 0 && uccl::memory_info(t.data_ptr()).device;
}
// ... and uccl can use it in place: contiguous. A non-contiguous tensor of such memory goes
// through a contiguous copy on the same device (staging.cc), so that every buffer of the call
// stays device memory: a host copy beside another tensor used in place would mix host and
// device buffers in one call (uccl refuses that), and costs two trips over the bus.
inline bool device_direct(const at::Tensor& t) { return t.is_contiguous() && device_owned(t); }

// Whether the stream is recording a CUDA graph (torch builds whose device guard can tell;
// older ones cannot, and then nothing is refused here).
template <class G>
auto stream_capturing(const G& g, const c10::Stream& s, int) -> decltype(g.isStreamCapturing(s)) {
  return g.isStreamCapturing(s);
}
template <class G>
bool stream_capturing(const G&, const c10::Stream&, long) {
  return false;
}

// The native handle (cudaStream_t, a simulated stream's handle) of the device's current stream:
// what uccl's `stream` arguments and Work::wait_stream take.
// A stream that is capturing a graph is refused: uccl's progress runs on the host, so a
// captured collective would not run again when the graph is replayed.
inline uintptr_t current_stream_handle(const at::Device& d) {
  c10::impl::VirtualGuardImpl impl(d.type());
  const c10::Stream s = impl.getStream(d);
  TORCH_CHECK_NOT_IMPLEMENTED(!stream_capturing(impl, s, 0), "uccl: the current stream of ", d,
                              " is capturing a graph (torch.cuda.graph / CUDAGraph.capture_begin); uccl "
                              "collectives cannot be captured, because their progress runs on the host and a "
                              "replay would not run them: issue the collective outside the capture");
  return reinterpret_cast<uintptr_t>(impl.getStreamNativeHandle(s));
}

// A contiguous host tensor with t's contents: t itself when it already is one, else a copy
// (for a device tensor, torch's device-to-host copy; it returns once the bytes are there).
inline at::Tensor host_contiguous(const at::Tensor& t) {
  if (t.is_cpu()) return t.contiguous();
  at::Tensor h = at::empty(t.sizes(), t.options().device(at::kCPU));
  h.copy_(t);
  return h;
}

// Copies a host result back into the caller's tensor (on the tensor's device, by torch).
// A copy to a device may still be in flight when torch returns (a device-to-device copy out of
// a flat buffer; CUDA's host-to-device copy from pageable memory): the stream is synchronized,
// so that the result is there when the work's wait() returns, whichever stream reads it.
// Below autograd, as a collective's own writes are (Gloo's, NCCL's): t may be a leaf that
// requires grad (pipelining's receive buffers, a parameter broadcast), where an in-place copy_
// under grad mode throws "a leaf Variable that requires grad is being used in an in-place
// operation".
inline void copy_back(const at::Tensor& t, const at::Tensor& host) {
  at::NoGradGuard no_grad;
  c10::OptionalDeviceGuard guard(t.is_cpu() ? std::nullopt : std::optional<at::Device>(t.device()));
  t.copy_(host);
  if (!t.is_cpu()) {
    c10::impl::VirtualGuardImpl impl(t.device().type());
    impl.synchronizeStream(impl.getStream(t.device()));
  }
}

inline void check_tensor(const at::Tensor& t, const char* op, const std::string& what) {
  TORCH_CHECK_VALUE(t.defined(), "uccl ", op, ": ", what, " is an undefined tensor");
  TORCH_CHECK_NOT_IMPLEMENTED(t.layout() == at::kStrided, "uccl ", op, ": ", what, " has layout ", t.layout(),
                              "; only dense (strided) tensors are supported");
  if (t.device().is_cpu() || staged_device(t.device()) || device_direct(t) || t.numel() == 0) return;
  TORCH_CHECK_NOT_IMPLEMENTED(false, "uccl ", op, ": ", what, " is on ", t.device(), ", whose memory no device backend "
                              "of this uccl build owns (uccl.build_info() lists them); the backend takes CPU tensors, "
                              "device memory uccl owns, and tensors of accelerators staged through host memory (cuda, "
                              "hip, xpu, mps, hpu, mtia, PrivateUse1)");
}

inline void check_same_dtype(const at::Tensor& t, at::ScalarType want, const char* op, const std::string& what,
                             const char* ref) {
  TORCH_CHECK_TYPE(t.scalar_type() == want, "uccl ", op, ": ", what, " has dtype ", t.scalar_type(), " but ", ref,
                   " has dtype ", want, "; all tensors of one op must have the same dtype");
}

inline void check_single(size_t n, const char* op, const char* what) {
  TORCH_CHECK_VALUE(n == 1, "uccl ", op, ": expects exactly one ", what, " per process (got ", n,
                    "); multi-tensor-per-process lists are not supported");
}

}  // namespace uccl_torch
