#include "base/reduce.h"

#include "base/elementwise.h"

#include <immintrin.h>

#include <algorithm>
#include <cpuid.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

// Run-time dispatch to an AVX2/F16C clone of the kernels. Sanitizer builds skip it: the
// ifunc resolver runs during relocation, before ThreadSanitizer's runtime is initialised.
#if defined(UCCL_NO_VECTOR_CLONES)
#define UCCL_VECTOR_CLONES
#else
#define UCCL_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif

namespace uccl {
namespace {

// The per-element arithmetic (conversions, ops, scale/divide rules) is shared with the CUDA
// kernels: cpp/base/elementwise.h.
using elem::Bf16;
using elem::Elem;
using elem::Fp16;
using elem::fp16_to_float;
using elem::float_to_fp16;

template <class K, class Fn>
UCCL_VECTOR_CLONES
void apply(void* dst, const void* a, const void* b, size_t n, Fn fn) {
  using S = typename Elem<K>::S;
  S* d = static_cast<S*>(dst);
  const S* x = static_cast<const S*>(a);
  const S* y = static_cast<const S*>(b);
  for (size_t i = 0; i < n; ++i) d[i] = Elem<K>::store(fn(Elem<K>::load(x[i]), Elem<K>::load(y[i])));
}

// ---- float16: widen a block to float, combine, narrow ---------------------------------------
// GCC converts _Float16 element by element through a libgcc call unless AVX512-FP16 is
// enabled: 1.8 GB/s against 28 GB/s for float32. F16C converts 8 halves per instruction but is
// only reachable through intrinsics, so fp16 widens an L1-sized block of each input to float,
// combines the blocks with the vectorized float kernel and narrows once: bit-identical results
// (float math, one round-to-nearest-even per element) at ~11 GB/s. bfloat16 needs no such
// detour: its conversions are shifts and a select, which apply() vectorizes as they are.
constexpr size_t kHalfBlock = 2048;  // elements: 2 x 8 KiB of float scratch, L1-resident

// F16C converts 8 halves per instruction, rounding to nearest even like the scalar cast.
__attribute__((target("avx,f16c")))
void fp16_widen_f16c(float* out, const uint16_t* in, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  for (; i < n; ++i) out[i] = _cvtsh_ss(in[i]);
}
__attribute__((target("avx,f16c")))
void fp16_narrow_f16c(uint16_t* out, const float* in, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) out[i] = _cvtss_sh(in[i], _MM_FROUND_TO_NEAREST_INT);
}
bool have_f16c() {
  // cpuid rather than __builtin_cpu_supports("f16c"), which clang 14 does not know: F16C and
  // AVX in CPUID.1:ECX, and the OS saving the YMM state (OSXSAVE + XCR0 bits 1 and 2).
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
    const bool avx = (c & bit_AVX) != 0, f16c = (c & bit_F16C) != 0, osxsave = (c & bit_OSXSAVE) != 0;
    if (!avx || !f16c || !osxsave) return false;
    unsigned lo = 0, hi = 0;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 0x6) == 0x6;
  }();
  return yes;
}

void widen(Fp16, float* out, const uint16_t* in, size_t n) {
  if (have_f16c()) return fp16_widen_f16c(out, in, n);
  for (size_t i = 0; i < n; ++i) out[i] = fp16_to_float(in[i]);
}
void narrow(Fp16, uint16_t* out, const float* in, size_t n) {
  if (have_f16c()) return fp16_narrow_f16c(out, in, n);
  for (size_t i = 0; i < n; ++i) out[i] = float_to_fp16(in[i]);
}

template <class K, class Fn>
void apply_half(void* dst, const void* a, const void* b, size_t n, Fn fn) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  alignas(64) float fx[kHalfBlock];
  alignas(64) float fy[kHalfBlock];
  for (size_t i = 0; i < n; i += kHalfBlock) {
    const size_t m = std::min(kHalfBlock, n - i);
    widen(K{}, fx, x + i, m);  // both inputs are read before d is written: aliasing is fine
    widen(K{}, fy, y + i, m);
    apply<float>(fx, fx, fy, m, fn);
    narrow(K{}, d + i, fx, m);
  }
}

template <class K>
void reduce_typed(void* dst, const void* a, const void* b, size_t n, RedOp op) {
  using T = decltype(Elem<K>::load(typename Elem<K>::S{}));
  auto run = [&](auto fn) {
    if constexpr (std::is_same_v<K, Fp16>) {
      apply_half<K>(dst, a, b, n, fn);
    } else {
      apply<K>(dst, a, b, n, fn);
    }
  };
  switch (op) {
    case RedOp::kSum:
    case RedOp::kAvg:
    case RedOp::kPremulSum: run([](T u, T v) { return elem::OpSum{}(u, v); }); break;
    case RedOp::kProd: run([](T u, T v) { return elem::OpProd{}(u, v); }); break;
    case RedOp::kMin: run([](T u, T v) { return elem::OpMin{}(u, v); }); break;
    case RedOp::kMax: run([](T u, T v) { return elem::OpMax{}(u, v); }); break;
    // Bitwise ops: callers refuse them for non-integer dtypes (check_op), so floats never come here.
    case RedOp::kBand:
    case RedOp::kBor:
    case RedOp::kBxor:
      if constexpr (std::is_integral_v<T>) {
        if (op == RedOp::kBand) run([](T u, T v) { return elem::OpBand{}(u, v); });
        else if (op == RedOp::kBor) run([](T u, T v) { return elem::OpBor{}(u, v); });
        else run([](T u, T v) { return elem::OpBxor{}(u, v); });
      }
      break;
  }
}

template <class K>
void scale_typed(void* dst, const void* src, size_t n, double factor) {
  using S = typename Elem<K>::S;
  S* d = static_cast<S*>(dst);
  const S* s = static_cast<const S*>(src);
  const auto f = elem::scale_factor<K>(factor);
  for (size_t i = 0; i < n; ++i) d[i] = elem::scale_one<K>(s[i], f);
}

template <class T>
void divide_typed(void* dst, const void* src, size_t n, int by) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  const T b = static_cast<T>(by);
  for (size_t i = 0; i < n; ++i) d[i] = elem::divide_one(s[i], b);
}

}  // namespace

void reduce(void* dst, const void* a, const void* b, size_t count, DataType dt, RedOp op) {
  switch (dt) {
    case DataType::kInt8: return reduce_typed<int8_t>(dst, a, b, count, op);
    case DataType::kUint8: return reduce_typed<uint8_t>(dst, a, b, count, op);
    case DataType::kInt32: return reduce_typed<int32_t>(dst, a, b, count, op);
    case DataType::kInt64: return reduce_typed<int64_t>(dst, a, b, count, op);
    case DataType::kFloat16: return reduce_typed<Fp16>(dst, a, b, count, op);
    case DataType::kBFloat16: return reduce_typed<Bf16>(dst, a, b, count, op);
    case DataType::kFloat32: return reduce_typed<float>(dst, a, b, count, op);
    case DataType::kFloat64: return reduce_typed<double>(dst, a, b, count, op);
  }
}

void scale(void* dst, const void* src, size_t count, DataType dt, double factor) {
  switch (dt) {
    case DataType::kInt8: return scale_typed<int8_t>(dst, src, count, factor);
    case DataType::kUint8: return scale_typed<uint8_t>(dst, src, count, factor);
    case DataType::kInt32: return scale_typed<int32_t>(dst, src, count, factor);
    case DataType::kInt64: return scale_typed<int64_t>(dst, src, count, factor);
    case DataType::kFloat16: return scale_typed<Fp16>(dst, src, count, factor);
    case DataType::kBFloat16: return scale_typed<Bf16>(dst, src, count, factor);
    case DataType::kFloat32: return scale_typed<float>(dst, src, count, factor);
    case DataType::kFloat64: return scale_typed<double>(dst, src, count, factor);
  }
}

void divide(void* dst, const void* src, size_t count, DataType dt, int n) {
  switch (dt) {
    case DataType::kInt8: return divide_typed<int8_t>(dst, src, count, n);
    case DataType::kUint8: return divide_typed<uint8_t>(dst, src, count, n);
    case DataType::kInt32: return divide_typed<int32_t>(dst, src, count, n);
    case DataType::kInt64: return divide_typed<int64_t>(dst, src, count, n);
    default: return scale(dst, src, count, dt, 1.0 / n);
  }
}

}  // namespace uccl
