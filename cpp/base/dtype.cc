#include "uccl/types.h"

namespace uccl {

size_t dtype_size(DataType t) {
  switch (t) {
    case DataType::kInt8:
    case DataType::kUint8: return 1;
    case DataType::kFloat16:
    case DataType::kBFloat16: return 2;
    case DataType::kInt32:
    case DataType::kFloat32: return 4;
    case DataType::kInt64:
    case DataType::kFloat64: return 8;
  }
  return 0;
}

const char* dtype_name(DataType t) {
  static const char* names[] = {"int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"};
  int i = static_cast<int>(t);
  return dtype_valid(i) ? names[i] : "invalid-dtype";
}

const char* redop_name(RedOp op) {
  static const char* names[] = {"sum", "prod", "min", "max", "avg", "premul_sum", "band", "bor", "bxor"};
  int i = static_cast<int>(op);
  return redop_valid(i) ? names[i] : "invalid-op";
}

bool dtype_is_integer(DataType t) {
  return t == DataType::kInt8 || t == DataType::kUint8 || t == DataType::kInt32 || t == DataType::kInt64;
}

bool dtype_valid(int t) { return t >= 0 && t < kNumDataTypes; }
bool redop_valid(int op) { return op >= 0 && op < kNumRedOps; }

}  // namespace uccl
