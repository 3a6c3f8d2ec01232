// Reduction kernels on host memory.
//
// float16 and bfloat16 are reduced in float and rounded once per element per call
// (round-to-nearest-even), so a ring step never accumulates in half precision.
// Kernels are plain loops that the compiler vectorizes; target_clones picks AVX2 at run time
// where the CPU has it, without building the whole library for one machine.
#pragma once

#include <cstddef>

#include "uccl/types.h"

namespace uccl {

// dst[i] = op(a[i], b[i]) for i < count. dst may alias a or b.
// kAvg and kPremulSum combine like kSum here: the scaling is applied by scale() before/after.
void reduce(void* dst, const void* a, const void* b, size_t count, DataType dt, RedOp op);

// dst[i] = src[i] * factor (dst may alias src). Used for premul_sum (before) and avg (after).
// Integer types: avg divides (truncating toward zero), premul multiplies by the rounded factor.
void scale(void* dst, const void* src, size_t count, DataType dt, double factor);
// Integer average: dst[i] = src[i] / n, exact integer division (truncation toward zero).
void divide(void* dst, const void* src, size_t count, DataType dt, int n);

}  // namespace uccl
