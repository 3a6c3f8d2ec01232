#include "base/reduce.h"

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

// ---- half-precision conversions (bit exact, round-to-nearest-even) --------------------------
inline float bf16_to_float(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  // Branch-free so that loops of it vectorize: NaN stays a (quiet) NaN, the rest rounds to
  // nearest even.
  const uint32_t quiet_nan = (bits >> 16) | 0x40u;
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}
#if defined(__FLT16_MAX__)
// The compiler has _Float16 (GCC >= 12 on x86): F16C instructions in the AVX2 clone.
inline float fp16_to_float(uint16_t h) {
  _Float16 v;
  std::memcpy(&v, &h, 2);
  return static_cast<float>(v);
}
inline uint16_t float_to_fp16(float f) {
  _Float16 v = static_cast<_Float16>(f);
  uint16_t h;
  std::memcpy(&h, &v, 2);
  return h;
}
#else
// Portable bit-exact conversions (clang < 15 has no _Float16 on x86; the fuzz build uses it).
inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf / nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;  // zero
  } else {        // subnormal: normalise
    exp = 113;
    while (!(mant & 0x400)) {
      mant <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint16_t float_to_fp16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return sign | 0x7e00;           // nan
  if (absx >= 0x477ff000u) return sign | 0x7c00;          // overflow (rounds to inf) or inf
  if (absx < 0x38800000u) {                               // subnormal or zero in fp16
    if (absx < 0x33000000u) return sign;                  // below half the smallest subnormal
    const uint32_t mant = (absx & 0x7fffff) | 0x800000;
    const int shift = 126 - static_cast<int>(absx >> 23);  // 14..24
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return sign | static_cast<uint16_t>(half);
  }
  uint32_t half = ((absx >> 13) - (112u << 10));
  const uint32_t rem = absx & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;  // round to nearest even
  return sign | static_cast<uint16_t>(half);
}
#endif

struct Bf16 {};
struct Fp16 {};

// Storage type and float<->storage conversion per element kind.
template <class T> struct Elem { using S = T; static T load(S v) { return v; } static S store(T v) { return v; } };
template <> struct Elem<Bf16> {
  using S = uint16_t;
  static float load(S v) { return bf16_to_float(v); }
  static S store(float v) { return float_to_bf16(v); }
};
template <> struct Elem<Fp16> {
  using S = uint16_t;
  static float load(S v) { return fp16_to_float(v); }
  static S store(float v) { return float_to_fp16(v); }
};

// Integer sum/prod wrap around like numpy instead of overflowing into undefined behaviour.
template <class T> inline T add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <class T> inline T mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  } else {
    return a * b;
  }
}

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
    case RedOp::kPremulSum: run([](T u, T v) { return add(u, v); }); break;
    case RedOp::kProd: run([](T u, T v) { return mul(u, v); }); break;
    // NaN propagates (v != v is true only for NaN), as in numpy and torch.
    case RedOp::kMin: run([](T u, T v) { return (v < u || v != v) ? v : u; }); break;
    case RedOp::kMax: run([](T u, T v) { return (v > u || v != v) ? v : u; }); break;
    // Bitwise ops: callers refuse them for non-integer dtypes (check_op), so floats never come here.
    case RedOp::kBand:
    case RedOp::kBor:
    case RedOp::kBxor:
      if constexpr (std::is_integral_v<T>) {
        if (op == RedOp::kBand) run([](T u, T v) { return static_cast<T>(u & v); });
        else if (op == RedOp::kBor) run([](T u, T v) { return static_cast<T>(u | v); });
        else run([](T u, T v) { return static_cast<T>(u ^ v); });
      }
      break;
  }
}

template <class K>
void scale_typed(void* dst, const void* src, size_t n, double factor) {
  using S = typename Elem<K>::S;
  using T = decltype(Elem<K>::load(S{}));
  S* d = static_cast<S*>(dst);
  const S* s = static_cast<const S*>(src);
  if constexpr (std::is_integral_v<T>) {
    const T f = static_cast<T>(std::llround(factor));
    for (size_t i = 0; i < n; ++i) d[i] = mul(s[i], f);
  } else {
    const T f = static_cast<T>(factor);
    for (size_t i = 0; i < n; ++i) d[i] = Elem<K>::store(Elem<K>::load(s[i]) * f);
  }
}

template <class T>
void divide_typed(void* dst, const void* src, size_t n, int by) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  for (size_t i = 0; i < n; ++i) d[i] = static_cast<T>(s[i] / static_cast<T>(by));
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
