// The CUDA kernels: reduce, scale, divide, copy, and the stream wait (see cuda/cuda_kernels.h).
//
// Every kernel is a grid-stride loop. When all its pointers are 16-byte aligned it moves
// 16-byte vectors (uint4: 16 int8, 8 halves, 4 floats, 2 doubles per load), so a warp issues
// 512-byte coalesced transactions; the tail, and any unaligned buffer, goes element by
// element. The per-element work is cpp/base/elementwise.h, the same functions the host
// kernels use, so results are bitwise equal to the host's.
#include <cuda_runtime.h>

#include <cstdint>

#include "base/elementwise.h"
#include "cuda/cuda_kernels.h"

namespace uccl {
namespace cuda {
namespace {

using elem::Bf16;
using elem::Elem;
using elem::Fp16;

constexpr int kThreads = 512;

template <class S> union Vec {
  uint4 u;
  S e[16 / sizeof(S)];
};

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Blocks for n work items: enough to fill the device (4 blocks of 512 threads per SM keep
// 2048 threads resident on sm_80/sm_90), never more than the items need.
unsigned grid_for(size_t items) {
  static int sms[64] = {0};
  int dev = 0;
  cudaGetDevice(&dev);
  int& s = sms[dev & 63];
  if (s == 0) {
    int v = 0;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || v <= 0) v = 80;
    s = v;
  }
  const size_t need = (items + kThreads - 1) / kThreads;
  const size_t cap = static_cast<size_t>(s) * 4;
  const size_t g = need < cap ? need : cap;
  return static_cast<unsigned>(g == 0 ? 1 : g);
}

// The one grid-stride loop every kernel is: d[i] = f(a[i], b[i]) (b is read only for Binary).
// 16-byte vectors when every pointer allows it, element by element for the tail.
template <bool Binary, class S, class F>
__global__ void map_kernel(S* d, const S* a, const S* b, size_t n, bool vec, F f) {
  constexpr int V = 16 / sizeof(S);
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t nvec = vec ? n / V : 0;
  for (size_t i = tid; i < nvec; i += stride) {
    Vec<S> x, y, z;
    x.u = reinterpret_cast<const uint4*>(a)[i];
    if constexpr (Binary) y.u = reinterpret_cast<const uint4*>(b)[i];
#pragma unroll
    for (int j = 0; j < V; ++j) z.e[j] = f(x.e[j], Binary ? y.e[j] : x.e[j]);
    reinterpret_cast<uint4*>(d)[i] = z.u;
  }
  for (size_t i = nvec * V + tid; i < n; i += stride) d[i] = f(a[i], Binary ? b[i] : a[i]);
}

// Set by preload_kernels(): the launchers then load their kernel instead of launching it.
thread_local bool t_preload = false;

template <bool Binary, class S, class F>
int launch_map(void* dst, const void* a, const void* b, size_t n, F f, cudaStream_t st) {
  if (t_preload) {
    cudaFuncAttributes attr;
    return static_cast<int>(cudaFuncGetAttributes(&attr, map_kernel<Binary, S, F>));
  }
  const bool vec = aligned16(dst) && aligned16(a) && (!Binary || aligned16(b));
  const size_t items = vec ? n / (16 / sizeof(S)) + 1 : n;
  map_kernel<Binary, S, F><<<grid_for(items), kThreads, 0, st>>>(static_cast<S*>(dst), static_cast<const S*>(a),
                                                                  static_cast<const S*>(b), n, vec, f);
  return static_cast<int>(cudaGetLastError());
}

// The per-element work of each kernel (cpp/base/elementwise.h, shared with the host).
template <class K, class Op>
struct Combine {
  using S = typename Elem<K>::S;
  Op op;
  __device__ S operator()(S x, S y) const { return elem::combine<K>(x, y, op); }
};
template <class K>
struct Scale {
  using S = typename Elem<K>::S;
  typename Elem<K>::C f;
  __device__ S operator()(S x, S) const { return elem::scale_one<K>(x, f); }
};
template <class T>
struct Divide {
  T by;
  __device__ T operator()(T x, T) const { return elem::divide_one(x, by); }
};

template <class K, class Op>
int run_reduce(void* dst, const void* a, const void* b, size_t n, Op op, cudaStream_t st) {
  return launch_map<true, typename Elem<K>::S>(dst, a, b, n, Combine<K, Op>{op}, st);
}

template <class K>
int reduce_typed(void* dst, const void* a, const void* b, size_t n, RedOp op, cudaStream_t st) {
  using C = typename Elem<K>::C;
  switch (op) {
    case RedOp::kSum:
    case RedOp::kAvg:
    case RedOp::kPremulSum: return run_reduce<K>(dst, a, b, n, elem::OpSum{}, st);
    case RedOp::kProd: return run_reduce<K>(dst, a, b, n, elem::OpProd{}, st);
    case RedOp::kMin: return run_reduce<K>(dst, a, b, n, elem::OpMin{}, st);
    case RedOp::kMax: return run_reduce<K>(dst, a, b, n, elem::OpMax{}, st);
    case RedOp::kBand:
    case RedOp::kBor:
    case RedOp::kBxor:
      if constexpr (std::is_integral_v<C>) {
        if (op == RedOp::kBand) return run_reduce<K>(dst, a, b, n, elem::OpBand{}, st);
        if (op == RedOp::kBor) return run_reduce<K>(dst, a, b, n, elem::OpBor{}, st);
        return run_reduce<K>(dst, a, b, n, elem::OpBxor{}, st);
      }
      break;
  }
  return static_cast<int>(cudaErrorInvalidValue);  // a bitwise op on floats, or an unknown op
}

template <class K>
int scale_typed(void* dst, const void* src, size_t n, double factor, cudaStream_t st) {
  return launch_map<false, typename Elem<K>::S>(dst, src, nullptr, n, Scale<K>{elem::scale_factor<K>(factor)}, st);
}

template <class T>
int divide_typed(void* dst, const void* src, size_t n, int by, cudaStream_t st) {
  return launch_map<false, T>(dst, src, nullptr, n, Divide<T>{static_cast<T>(by)}, st);
}

}  // namespace

int launch_reduce(void* dst, const void* a, const void* b, size_t count, DataType dt, RedOp op,
                  void* stream) {
  if (count == 0) return 0;
  auto st = static_cast<cudaStream_t>(stream);
  switch (dt) {
    case DataType::kInt8: return reduce_typed<int8_t>(dst, a, b, count, op, st);
    case DataType::kUint8: return reduce_typed<uint8_t>(dst, a, b, count, op, st);
    case DataType::kInt32: return reduce_typed<int32_t>(dst, a, b, count, op, st);
    case DataType::kInt64: return reduce_typed<int64_t>(dst, a, b, count, op, st);
    case DataType::kFloat16: return reduce_typed<Fp16>(dst, a, b, count, op, st);
    case DataType::kBFloat16: return reduce_typed<Bf16>(dst, a, b, count, op, st);
    case DataType::kFloat32: return reduce_typed<float>(dst, a, b, count, op, st);
    case DataType::kFloat64: return reduce_typed<double>(dst, a, b, count, op, st);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

int launch_scale(void* dst, const void* src, size_t count, DataType dt, double factor, void* stream) {
  if (count == 0) return 0;
  auto st = static_cast<cudaStream_t>(stream);
  switch (dt) {
    case DataType::kInt8: return scale_typed<int8_t>(dst, src, count, factor, st);
    case DataType::kUint8: return scale_typed<uint8_t>(dst, src, count, factor, st);
    case DataType::kInt32: return scale_typed<int32_t>(dst, src, count, factor, st);
    case DataType::kInt64: return scale_typed<int64_t>(dst, src, count, factor, st);
    case DataType::kFloat16: return scale_typed<Fp16>(dst, src, count, factor, st);
    case DataType::kBFloat16: return scale_typed<Bf16>(dst, src, count, factor, st);
    case DataType::kFloat32: return scale_typed<float>(dst, src, count, factor, st);
    case DataType::kFloat64: return scale_typed<double>(dst, src, count, factor, st);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

int launch_divide(void* dst, const void* src, size_t count, DataType dt, int n, void* stream) {
  if (count == 0) return 0;
  if (n == 0) return static_cast<int>(cudaErrorInvalidValue);
  auto st = static_cast<cudaStream_t>(stream);
  switch (dt) {
    case DataType::kInt8: return divide_typed<int8_t>(dst, src, count, n, st);
    case DataType::kUint8: return divide_typed<uint8_t>(dst, src, count, n, st);
    case DataType::kInt32: return divide_typed<int32_t>(dst, src, count, n, st);
    case DataType::kInt64: return divide_typed<int64_t>(dst, src, count, n, st);
    default: return launch_scale(dst, src, count, dt, 1.0 / n, stream);  // the host's rule
  }
}

namespace {
__global__ void copy_kernel(char* d, const char* s, size_t n, bool vec) {
  const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t nvec = vec ? n / 16 : 0;
  for (size_t i = tid; i < nvec; i += stride) reinterpret_cast<uint4*>(d)[i] = reinterpret_cast<const uint4*>(s)[i];
  for (size_t i = nvec * 16 + tid; i < n; i += stride) d[i] = s[i];
}
}  // namespace

int launch_copy(void* dst, const void* src, size_t bytes, void* stream) {
  if (t_preload) {
    cudaFuncAttributes attr;
    return static_cast<int>(cudaFuncGetAttributes(&attr, copy_kernel));
  }
  if (bytes == 0) return 0;
  const bool vec = aligned16(dst) && aligned16(src);
  const size_t items = vec ? bytes / 16 + 1 : bytes;
  copy_kernel<<<grid_for(items), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<char*>(dst), static_cast<const char*>(src), bytes, vec);
  return static_cast<int>(cudaGetLastError());
}

namespace {
__global__ void wait_flag_kernel(const uint32_t* flag) {
  unsigned ns = 64;
  for (;;) {
    uint32_t v;
    // Acquire at system scope: the host's release store, and what the operation wrote before it.
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
    if (v >= 1u) return;
    __nanosleep(ns);
    if (ns < 4096) ns *= 2;
  }
}
}  // namespace

int launch_wait_flag(const void* flag, void* stream) {
  if (t_preload) {
    cudaFuncAttributes attr;
    return static_cast<int>(cudaFuncGetAttributes(&attr, wait_flag_kernel));
  }
  wait_flag_kernel<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(static_cast<const uint32_t*>(flag));
  return static_cast<int>(cudaGetLastError());
}

void preload_kernels() {
  t_preload = true;
  launch_wait_flag(nullptr, nullptr);
  launch_copy(nullptr, nullptr, 0, nullptr);
  static const DataType kTypes[] = {DataType::kInt8,     DataType::kUint8,     DataType::kInt32,   DataType::kInt64,
                                    DataType::kFloat16,  DataType::kBFloat16,  DataType::kFloat32, DataType::kFloat64};
  static const RedOp kOps[] = {RedOp::kSum, RedOp::kProd, RedOp::kMin, RedOp::kMax,
                               RedOp::kBand, RedOp::kBor, RedOp::kBxor};
  int dummy = 0;  // the launchers return before touching it (count 1, no launch)
  for (DataType dt : kTypes) {
    for (RedOp op : kOps) launch_reduce(&dummy, &dummy, &dummy, 1, dt, op, nullptr);
    launch_scale(&dummy, &dummy, 1, dt, 2.0, nullptr);
    launch_divide(&dummy, &dummy, 1, dt, 2, nullptr);
  }
  t_preload = false;
  cudaGetLastError();  // bitwise ops on floats answer cudaErrorInvalidValue: not an error here
}

}  // namespace cuda
}  // namespace uccl
