// The shared per-element arithmetic (cpp/base/elementwise.h) that the host kernels and the CUDA
// kernels both instantiate. The GPU cannot run here, so this pins what the device code is
// built from: the portable float16 conversions (the reference for every fast path) equal the
// compiler's _Float16 conversions for all 65536 halves and for floats around every rounding
// boundary; NaN propagation, the canonical NaN, integer wrap-around and the scale/divide rules.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "test_util.h"
#include "base/elementwise.h"

using namespace uccl;
using namespace uccl::elem;

namespace {
uint16_t via_float16(float f) {
  _Float16 v = static_cast<_Float16>(f);
  uint16_t h;
  std::memcpy(&h, &v, 2);
  return h;
}
float from_float16(uint16_t h) {
  _Float16 v;
  std::memcpy(&v, &h, 2);
  return static_cast<float>(v);
}
}  // namespace

TEST_CASE("float16 widening: portable == _Float16 for every half") {
  int bad = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = fp16_to_float_portable(static_cast<uint16_t>(h));
    const float b = from_float16(static_cast<uint16_t>(h));
    if (std::isnan(b)) {
      if (!std::isnan(a)) ++bad;
    } else if (float_bits(a) != float_bits(b)) {
      ++bad;
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("float16 narrowing: portable == _Float16 at every rounding boundary and at random") {
  int bad = 0;
  auto check = [&](float f) {
    const uint16_t a = float_to_fp16_portable(f), b = via_float16(f);
    if (a != b) ++bad;  // NaN too: quiet bit set, payload truncated, as F16C and cvt do
  };
  // Each half value, the midpoints to its neighbours and one ulp either side of them: where
  // round-to-nearest-even differs from truncation or from round-half-up.
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const float lo = fp16_to_float_portable(static_cast<uint16_t>(h));
    const float hi = fp16_to_float_portable(static_cast<uint16_t>(h + 1));
    const float mid = lo + (hi - lo) / 2;  // exact in float
    for (float f : {lo, mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e9f)}) {
      check(f);
      check(-f);
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 1000000; ++i) {
    const uint32_t bits = rng();
    check(bits_float(bits));
  }
  check(std::numeric_limits<float>::infinity());
  check(65520.f);  // the first float that rounds to inf
  check(65519.99f);
  check(std::numeric_limits<float>::quiet_NaN());
  CHECK(bad == 0);
}

TEST_CASE("bfloat16 narrowing rounds to nearest even and keeps NaN quiet") {
  CHECK(float_to_bf16(1.0f) == 0x3f80);
  CHECK(float_to_bf16(bits_float(0x3f808000u)) == 0x3f80);  // tie, even below
  CHECK(float_to_bf16(bits_float(0x3f818000u)) == 0x3f82);  // tie, even above
  CHECK(float_to_bf16(bits_float(0x3f808001u)) == 0x3f81);
  const uint16_t n = float_to_bf16(bits_float(0x7f800001u));  // signalling NaN payload
  CHECK((n & 0x7f80) == 0x7f80);
  CHECK((n & 0x40) != 0);
  CHECK(bf16_to_float(0x4049) == bits_float(0x40490000u));
}

TEST_CASE("ops: NaN propagation, integer wrap-around, bitwise") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(std::isnan(OpMin{}(1.0f, nan)));
  CHECK(std::isnan(OpMin{}(nan, 1.0f)));
  CHECK(std::isnan(OpMax{}(nan, 1.0f)));
  CHECK(std::isnan(OpMax{}(1.0f, nan)));
  CHECK(OpMin{}(2.0, -3.0) == -3.0);
  CHECK(OpSum{}(int8_t{127}, int8_t{1}) == int8_t{-128});
  CHECK(OpProd{}(int32_t{1} << 30, int32_t{4}) == 0);
  CHECK(OpSum{}(uint8_t{255}, uint8_t{2}) == uint8_t{1});
  CHECK(OpBxor{}(int64_t{6}, int64_t{3}) == 5);
  CHECK(combine<Bf16>(uint16_t{0x3f80}, uint16_t{0x3f80}, OpSum{}) == 0x4000);  // 1 + 1 = 2
  CHECK(combine<Fp16>(uint16_t{0x3c00}, uint16_t{0x3c00}, OpProd{}) == 0x3c00);  // 1 * 1
}

TEST_CASE("scale and divide rules") {
  CHECK(scale_factor<int32_t>(2.5) == 3);    // llround: halves away from zero
  CHECK(scale_factor<int32_t>(-2.5) == -3);
  CHECK(scale_factor<int8_t>(0.4) == 0);
  CHECK(scale_one<int8_t>(int8_t{100}, int8_t{3}) == int8_t{44});  // 300 wraps to 44
  CHECK(scale_factor<Fp16>(0.1) == 0.1f);
  CHECK(scale_one<Bf16>(uint16_t{0x4000}, 0.5f) == 0x3f80);     // 2 * 0.5 = 1
  CHECK(divide_one(int32_t{-7}, int32_t{2}) == -3);              // truncation toward zero
  CHECK(divide_one(uint8_t{255}, uint8_t{4}) == 63);
}

TEST_CASE("every NaN a kernel writes is the canonical NaN, whatever NaN came in") {
  // Signalling, quiet, negative, with and without payload: x86 keeps an input NaN's payload
  // and sign through arithmetic and F16C, NVIDIA's float units answer with 0x7fffffff; the
  // stores make both give the same bits.
  const uint32_t nans32[] = {0x7f800001u, 0x7fc00000u, 0xffc00000u, 0x7fc12345u, 0xff812345u, 0x7fffffffu};
  for (uint32_t bits : nans32) {
    const float nan = bits_float(bits);
    INFO("input bits " << bits);
    CHECK(float_bits(combine<float>(nan, 1.0f, OpSum{})) == 0x7fffffffu);
    CHECK(float_bits(combine<float>(1.0f, nan, OpProd{})) == 0x7fffffffu);
    CHECK(float_bits(combine<float>(1.0f, nan, OpMin{})) == 0x7fffffffu);  // a select keeps the input's
    CHECK(float_bits(combine<float>(nan, 1.0f, OpMax{})) == 0x7fffffffu);  // payload: stored canonical
    CHECK(float_bits(scale_one<float>(nan, 0.37f)) == 0x7fffffffu);
    const uint16_t b = static_cast<uint16_t>(bits >> 16) | 1, h = static_cast<uint16_t>((bits >> 16) & 0x8000) | 0x7c01;
    CHECK(combine<Bf16>(b, uint16_t{0x3f80}, OpSum{}) == 0x7fff);
    CHECK(combine<Bf16>(uint16_t{0x3f80}, b, OpMax{}) == 0x7fff);
    CHECK(scale_one<Bf16>(b, 0.37f) == 0x7fff);
    CHECK(combine<Fp16>(h, uint16_t{0x3c00}, OpSum{}) == 0x7fff);
    CHECK(combine<Fp16>(uint16_t{0x3c00}, h, OpMin{}) == 0x7fff);
    CHECK(scale_one<Fp16>(h, 0.37f) == 0x7fff);
    uint64_t nan64_bits = (static_cast<uint64_t>(bits & 0x80000000u) << 32) | 0x7ff0000000000001ull;
    double nan64;
    std::memcpy(&nan64, &nan64_bits, 8);
    const double r = combine<double>(nan64, 2.0, OpProd{});
    uint64_t got64;
    std::memcpy(&got64, &r, 8);
    CHECK(got64 == 0x7fffffffffffffffull);
  }
  // Not NaN: untouched (infinities, negative zero).
  CHECK(float_bits(combine<float>(-0.0f, -0.0f, OpSum{})) == 0x80000000u);
  CHECK(std::isinf(combine<float>(std::numeric_limits<float>::infinity(), 1.0f, OpSum{})));
}
