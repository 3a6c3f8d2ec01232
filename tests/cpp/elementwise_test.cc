// The shared per-element arithmetic (cpp/base/elementwise.h) that the host kernels and the CUDA
// kernels both instantiate. The GPU cannot run here, so this pins what the device code is
// built from: the portable float16 conversions (the reference for every fast path) equal the
// compiler's _Float16 conversions for all 65536 halves and for floats around every rounding
// boundary; NaN propagation, integer wrap-around and the scale/divide rules.
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
bool is_nan_half(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
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
    if (is_nan_half(b) ? !is_nan_half(a) : a != b) ++bad;
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
