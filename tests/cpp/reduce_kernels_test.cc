// uccl::reduce against a plain scalar reference, for every dtype and op, odd counts, aliasing,
// and the special values where vectorized half-precision conversions could differ (NaN, inf,
// denormals, rounding ties, overflow to inf). The kernels are vectorized with target_clones
// and F16C intrinsics; this test pins them to the scalar semantics of reduce.h.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ios>
#include <random>
#include <type_traits>
#include <vector>

#include "test_util.h"
#include "base/reduce.h"
#include "base/stream_copy.h"

using namespace uccl;

namespace {

float bf16_to_float(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}
float fp16_to_float(uint16_t h) {
  _Float16 v;
  std::memcpy(&v, &h, 2);
  return static_cast<float>(v);
}
uint16_t float_to_fp16(float f) {
  _Float16 v = static_cast<_Float16>(f);
  uint16_t h;
  std::memcpy(&h, &v, 2);
  return h;
}

template <class T>
T ref_op(T u, T v, RedOp op) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case RedOp::kProd: return static_cast<T>(static_cast<U>(static_cast<U>(u) * static_cast<U>(v)));
      case RedOp::kMin: return v < u ? v : u;
      case RedOp::kMax: return v > u ? v : u;
      case RedOp::kBand: return static_cast<T>(u & v);
      case RedOp::kBor: return static_cast<T>(u | v);
      case RedOp::kBxor: return static_cast<T>(u ^ v);
      default: return static_cast<T>(static_cast<U>(u) + static_cast<U>(v));
    }
  } else {
    switch (op) {
      case RedOp::kProd: return u * v;
      case RedOp::kMin: return (v < u || v != v) ? v : u;  // NaN propagates like numpy/torch
      case RedOp::kMax: return (v > u || v != v) ? v : u;
      default: return u + v;
    }
  }
}

// Reference result for element i, as raw bits in a uint64 (with a "is NaN" flag for floats).
struct Ref {
  uint64_t bits;
  bool nan;
};

template <class T>
Ref ref_plain(const void* a, const void* b, size_t i, RedOp op) {
  T x, y;
  std::memcpy(&x, static_cast<const char*>(a) + i * sizeof(T), sizeof(T));
  std::memcpy(&y, static_cast<const char*>(b) + i * sizeof(T), sizeof(T));
  T r = ref_op(x, y, op);
  Ref out{0, false};
  std::memcpy(&out.bits, &r, sizeof(T));
  if constexpr (!std::is_integral_v<T>) out.nan = std::isnan(r);
  return out;
}

Ref ref_half(const void* a, const void* b, size_t i, RedOp op, bool bf16) {
  uint16_t x, y;
  std::memcpy(&x, static_cast<const char*>(a) + i * 2, 2);
  std::memcpy(&y, static_cast<const char*>(b) + i * 2, 2);
  float fx = bf16 ? bf16_to_float(x) : fp16_to_float(x);
  float fy = bf16 ? bf16_to_float(y) : fp16_to_float(y);
  float r = ref_op(fx, fy, op);
  uint16_t h = bf16 ? float_to_bf16(r) : float_to_fp16(r);
  return Ref{h, std::isnan(r)};
}

Ref reference(DataType dt, const void* a, const void* b, size_t i, RedOp op) {
  switch (dt) {
    case DataType::kInt8: return ref_plain<int8_t>(a, b, i, op);
    case DataType::kUint8: return ref_plain<uint8_t>(a, b, i, op);
    case DataType::kInt32: return ref_plain<int32_t>(a, b, i, op);
    case DataType::kInt64: return ref_plain<int64_t>(a, b, i, op);
    case DataType::kFloat16: return ref_half(a, b, i, op, false);
    case DataType::kBFloat16: return ref_half(a, b, i, op, true);
    case DataType::kFloat32: return ref_plain<float>(a, b, i, op);
    case DataType::kFloat64: return ref_plain<double>(a, b, i, op);
  }
  return Ref{0, false};
}

// Every NaN a kernel writes is the canonical one (cpp/base/elementwise.h), bit for bit, so that
// the result does not depend on the device that computed it.
bool is_nan_bits(DataType dt, uint64_t bits) {
  switch (dt) {
    case DataType::kFloat16: return bits == 0x7fff;
    case DataType::kBFloat16: return bits == 0x7fff;
    case DataType::kFloat32: return bits == 0x7fffffffu;
    case DataType::kFloat64: return bits == 0x7fffffffffffffffull;
    default: return false;
  }
}

// Inputs: random bits (covers NaN/inf/denormals for the float types) mixed with ordinary
// values, so that sums both round (ties included) and overflow.
std::vector<uint8_t> inputs(DataType dt, size_t count, std::mt19937_64& rng) {
  const size_t esz = dtype_size(dt);
  std::vector<uint8_t> v(count * esz);
  for (size_t i = 0; i < count; ++i) {
    uint64_t bits = rng();
    if (i % 3 == 0) {
      if (dt == DataType::kFloat16) bits = float_to_fp16(static_cast<float>(static_cast<int>(rng() % 140000) - 70000) / 3.f);
      if (dt == DataType::kBFloat16) bits = float_to_bf16(static_cast<float>(static_cast<int>(rng() % 1000) - 500) / 7.f);
    }
    if (i % 5 == 1 && dt == DataType::kFloat16) bits = rng() % 0x400;        // fp16 denormals
    if (i % 5 == 1 && dt == DataType::kBFloat16) bits = 0x0080 + rng() % 4;  // tiny normals -> denormal sums
    std::memcpy(&v[i * esz], &bits, esz);
  }
  return v;
}

void check_case(DataType dt, RedOp op, size_t count, int alias, std::mt19937_64& rng) {
  const size_t esz = dtype_size(dt);
  std::vector<uint8_t> a = inputs(dt, count, rng), b = inputs(dt, count, rng), out(count * esz + 1, 0xab);
  const std::vector<uint8_t> a0 = a, b0 = b;
  void* dst = alias == 1 ? a.data() : alias == 2 ? b.data() : out.data();
  reduce(dst, a.data(), b.data(), count, dt, op);
  const uint8_t* got = static_cast<const uint8_t*>(dst);
  for (size_t i = 0; i < count; ++i) {
    Ref want = reference(dt, a0.data(), b0.data(), i, op);
    uint64_t bits = 0;
    std::memcpy(&bits, got + i * esz, esz);
    const bool ok = want.nan ? is_nan_bits(dt, bits) : bits == want.bits;
    if (!ok) {  // one failure per case: the first wrong element
      FAIL_CHECK(dtype_name(dt) << " " << redop_name(op) << " count " << count << " alias " << alias << ": element "
                                << i << " = 0x" << std::hex << bits << ", expected 0x" << want.bits);
      return;
    }
  }
  if (alias == 0) CHECK(out[count * esz] == 0xab);
}

}  // namespace

// stream_copy: every destination alignment and sizes around the 64-byte body, bytes outside
// [dst, dst + n) untouched.
void check_stream_copy(std::mt19937_64& rng) {
  std::vector<uint8_t> src(4096 + 128), dst(4096 + 256);
  for (auto& b : src) b = static_cast<uint8_t>(rng());
  for (size_t n : {size_t(0), size_t(1), size_t(63), size_t(64), size_t(65), size_t(127), size_t(200), size_t(4096)})
    for (size_t doff = 0; doff < 64; doff += 3)
      for (size_t soff : {size_t(0), size_t(5)}) {
        std::fill(dst.begin(), dst.end(), 0xa5);
        stream_copy(dst.data() + 64 + doff, src.data() + soff, n);
        CHECK(std::memcmp(dst.data() + 64 + doff, src.data() + soff, n) == 0);
        for (size_t i = 0; i < dst.size(); ++i)
          if (i < 64 + doff || i >= 64 + doff + n) CHECK(dst[i] == 0xa5);
      }
}

TEST_CASE("stream_copy: every destination alignment, bytes outside the copy untouched") {
  std::mt19937_64 rng(12345);
  check_stream_copy(rng);
}

TEST_CASE("reduce: every dtype and op against a scalar reference, in and out of place") {
  std::mt19937_64 rng(12345);
  const size_t counts[] = {0, 1, 7, 8, 15, 16, 17, 33, 2047, 2048, 2049, 5000};
  for (int dt = 0; dt < kNumDataTypes; ++dt)
    for (int op = 0; op < kNumRedOps; ++op)
      // Bitwise ops exist for integer dtypes only (the communicator refuses the others).
      if (!redop_is_bitwise(static_cast<RedOp>(op)) || dtype_is_integer(static_cast<DataType>(dt)))
      for (size_t count : counts)
        for (int alias = 0; alias < 3; ++alias) check_case(static_cast<DataType>(dt), static_cast<RedOp>(op), count, alias, rng);
}

TEST_CASE("fp16: widening and narrowing are exact round trips for every value") {
  // Every fp16 value against every fp16 "nudge".
  std::vector<uint16_t> all(65536), zero(65536, 0), out(65536);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  reduce(out.data(), all.data(), zero.data(), all.size(), DataType::kFloat16, RedOp::kMax);
  for (size_t i = 0; i < all.size(); ++i) {
    Ref want = reference(DataType::kFloat16, all.data(), zero.data(), i, RedOp::kMax);
    CHECK((want.nan ? is_nan_bits(DataType::kFloat16, out[i]) : out[i] == want.bits));
  }
}
