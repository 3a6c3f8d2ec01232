// The per-element arithmetic of every reduction kernel, host and device alike.
//
// Why one header: a result must not depend on which device reduced it (docs/DEVICE_INTERFACE.md).
// The host kernels (cpp/base/reduce.cc) and the CUDA kernels (cuda/cuda_kernels.cu) both
// instantiate these functions, so the host unit tests (tests/cpp/reduce_kernels_test.cc,
// elementwise_test.cc) check the very arithmetic the GPU runs:
//  * bfloat16 and float16 are widened to float, combined in float and rounded once
//    (round-to-nearest-even).
//  * min/max propagate NaN (as numpy and torch do): v != v is true only for NaN.
//  * every NaN a kernel writes is THE canonical quiet NaN (positive, all payload bits set:
//    0x7fff / 0x7fffffff / 0x7fffffffffffffff), whatever NaN came in. NVIDIA's float units
//    answer any arithmetic on a NaN with that NaN while x86 keeps the input's payload, so
//    without this rule a result would depend on the device that computed it (first seen on an
//    H200: scale of NaN inputs differed from the host in fp16, bf16 and float32). One select
//    per element in Elem::store, which vectorizes.
//  * integer sum/prod wrap around (unsigned arithmetic), never undefined overflow.
//  * bitwise ops exist for integers only (callers refuse them for floats).
//  * scale: integers multiply by the factor rounded to the nearest integer (llround); floats
//    multiply by the factor converted to the element's compute type (float for fp16/bf16).
//  * divide (integer avg): truncating division; floats use scale by 1/n.
//
// Everything is a header-only inline function marked UCCL_HD, which is `__host__ __device__`
// under nvcc and nothing for the host compiler, so the host build needs no CUDA at all.
// Speed on the host: these are the same inline expressions reduce.cc always had; loops over
// them still vectorize (branch-free bf16 rounding, selects for min/max).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__CUDACC__)
#define UCCL_HD __host__ __device__ __forceinline__
#include <cuda_fp16.h>
#else
#define UCCL_HD inline
#endif

namespace uccl {
namespace elem {

UCCL_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
UCCL_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// ---- the canonical NaN -----------------------------------------------------------------------
UCCL_HD float canonical_nan(float v) { return v != v ? bits_float(0x7fffffffu) : v; }
UCCL_HD double canonical_nan(double v) {
#if defined(__CUDA_ARCH__)
  return v != v ? __longlong_as_double(0x7fffffffffffffffll) : v;
#else
  const uint64_t u = 0x7fffffffffffffffull;
  double nan;
  std::memcpy(&nan, &u, 8);
  return v != v ? nan : v;
#endif
}

// ---- bfloat16 (bit exact, round-to-nearest-even) ---------------------------------------------
UCCL_HD float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }
// Branch-free so that loops of it vectorize: NaN becomes `nan_bits(bits)`, the rest rounds to
// nearest even.
template <class NanBits>
UCCL_HD uint16_t bf16_narrow(float f, NanBits nan_bits) {
  const uint32_t bits = float_bits(f);
  const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  return static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? nan_bits(bits) : rounded);
}
struct QuietPayload {
  UCCL_HD uint32_t operator()(uint32_t bits) const { return (bits >> 16) | 0x40u; }
};
struct CanonicalBf16Nan {
  UCCL_HD uint32_t operator()(uint32_t) const { return 0x7fffu; }
};
// The conversion: a NaN stays a NaN of its sign and payload, made quiet.
UCCL_HD uint16_t float_to_bf16(float f) { return bf16_narrow(f, QuietPayload{}); }

// ---- float16, portable bit-exact conversions ---------------------------------------------------
// The reference every fast path must equal (elementwise_test checks _Float16/F16C against it
// for all 65536 halves and for the float rounding boundaries). The host kernels use F16C or
// _Float16 where the compiler has it, the GPU its cvt instructions (IEEE round-to-nearest-even).
UCCL_HD float fp16_to_float_portable(uint16_t h) {
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
  return bits_float(bits);
}
UCCL_HD uint16_t float_to_fp16_portable(float f) {
  const uint32_t x = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00 | ((absx >> 13) & 0x3ff));  // nan, as F16C
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

#if defined(__CUDA_ARCH__)
// cvt.f32.f16 / cvt.rn.f16.f32: exact widening and IEEE round-to-nearest-even narrowing.
UCCL_HD float fp16_to_float(uint16_t h) { return __half2float(__ushort_as_half(h)); }
UCCL_HD uint16_t float_to_fp16(float f) { return __half_as_ushort(__float2half_rn(f)); }
#elif defined(__FLT16_MAX__) && !defined(__CUDACC__)
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
// No _Float16 (clang < 15 on x86, the host pass of nvcc): the portable conversions.
UCCL_HD float fp16_to_float(uint16_t h) { return fp16_to_float_portable(h); }
UCCL_HD uint16_t float_to_fp16(float f) { return float_to_fp16_portable(f); }
#endif

// ---- element kinds: storage type and float <-> storage ----------------------------------------
struct Bf16 {};
struct Fp16 {};

template <class T> struct Elem {
  using S = T;  // storage
  using C = T;  // compute
  static UCCL_HD T load(S v) { return v; }
  static UCCL_HD S store(T v) {
    if constexpr (std::is_floating_point_v<T>) {
      return canonical_nan(v);
    } else {
      return v;
    }
  }
};
template <> struct Elem<Bf16> {
  using S = uint16_t;
  using C = float;
  static UCCL_HD float load(S v) { return bf16_to_float(v); }
  static UCCL_HD S store(float v) { return bf16_narrow(v, CanonicalBf16Nan{}); }  // one select
};
template <> struct Elem<Fp16> {
  using S = uint16_t;
  using C = float;
  static UCCL_HD float load(S v) { return fp16_to_float(v); }
  static UCCL_HD S store(float v) { return float_to_fp16(canonical_nan(v)); }
};

// ---- the operations on compute values ----------------------------------------------------------
// Integer sum/prod wrap around like numpy instead of overflowing into undefined behaviour.
template <class T> UCCL_HD T add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}
template <class T> UCCL_HD T mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  } else {
    return a * b;
  }
}
// NaN propagates (v != v is true only for NaN), as in numpy and torch.
template <class T> UCCL_HD T min_nan(T u, T v) { return (v < u || v != v) ? v : u; }
template <class T> UCCL_HD T max_nan(T u, T v) { return (v > u || v != v) ? v : u; }

// Functors (a kernel is instantiated once per op; no switch in the inner loop).
struct OpSum { template <class T> UCCL_HD T operator()(T u, T v) const { return add(u, v); } };
struct OpProd { template <class T> UCCL_HD T operator()(T u, T v) const { return mul(u, v); } };
struct OpMin { template <class T> UCCL_HD T operator()(T u, T v) const { return min_nan(u, v); } };
struct OpMax { template <class T> UCCL_HD T operator()(T u, T v) const { return max_nan(u, v); } };
struct OpBand { template <class T> UCCL_HD T operator()(T u, T v) const { return static_cast<T>(u & v); } };
struct OpBor { template <class T> UCCL_HD T operator()(T u, T v) const { return static_cast<T>(u | v); } };
struct OpBxor { template <class T> UCCL_HD T operator()(T u, T v) const { return static_cast<T>(u ^ v); } };

// One element of dst = op(a, b) in storage form.
template <class K, class Op>
UCCL_HD typename Elem<K>::S combine(typename Elem<K>::S a, typename Elem<K>::S b, Op op) {
  return Elem<K>::store(op(Elem<K>::load(a), Elem<K>::load(b)));
}

// ---- scale / divide rules -------------------------------------------------------------------
// The factor in the element's compute type. Integers: the nearest integer (llround semantics:
// halves away from zero), computed once on the host by the caller.
template <class K> inline typename Elem<K>::C scale_factor(double factor) {
  using C = typename Elem<K>::C;
  if constexpr (std::is_integral_v<C>) {
    return static_cast<C>(std::llround(factor));
  } else {
    return static_cast<C>(factor);
  }
}
template <class K>
UCCL_HD typename Elem<K>::S scale_one(typename Elem<K>::S s, typename Elem<K>::C f) {
  using C = typename Elem<K>::C;
  if constexpr (std::is_integral_v<C>) {
    return mul(s, f);
  } else {
    return Elem<K>::store(Elem<K>::load(s) * f);
  }
}
// Integer average: truncation toward zero (C++ and CUDA integer division).
template <class T> UCCL_HD T divide_one(T s, T by) { return static_cast<T>(s / by); }

}  // namespace elem
}  // namespace uccl
