#include "base/config.h"
#include "uccl/types.h"
#include "test_util.h"

using namespace uccl;

TEST_CASE("dtype and reduction op tables") {
  CHECK(dtype_size(DataType::kBFloat16) == 2);
  CHECK(dtype_size(DataType::kInt64) == 8);
  CHECK(!dtype_valid(8));
  CHECK((redop_valid(8) && !redop_valid(9)));
  CHECK((redop_is_bitwise(RedOp::kBxor) && !dtype_is_integer(DataType::kFloat16)));
}

TEST_CASE("the config table lists UCCL_TIMEOUT_S") {
  bool found = false;
  for (auto& v : config_table()) found |= v.name == "UCCL_TIMEOUT_S";
  CHECK(found);
}
