#include "check.h"
#include "base/config.h"
#include "uccl/types.h"

using namespace uccl;

int main() {
  CHECK(dtype_size(DataType::kBFloat16) == 2);
  CHECK(dtype_size(DataType::kInt64) == 8);
  CHECK(!dtype_valid(8));
  CHECK(redop_valid(8) && !redop_valid(9));
  CHECK(redop_is_bitwise(RedOp::kBxor) && !dtype_is_integer(DataType::kFloat16));
  bool found = false;
  for (auto& v : config_table()) found |= v.name == "UCCL_TIMEOUT_S";
  CHECK(found);
  std::puts("dtype_test ok");
  return 0;
}
