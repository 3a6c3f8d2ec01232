// UCCL_IB_HCA parsing, NCCL syntax, kept free of verbs.h so that it is unit-tested on any host.
//
//   "mlx5_0:1,mlx5_1"  prefix match on the device name, optional port after the colon
//   "^mlx5_2"          exclude the listed devices/ports, keep every other one
//   "=mlx5_1"          exact device names instead of prefixes ("^=mlx5_1" excludes exactly)
//   ""                 every device and port
#pragma once

#include <string>
#include <vector>

namespace uccl {

struct HcaSpec {
  struct Entry {
    std::string name;
    int port = -1;  // -1: any port
  };
  bool exclude = false;
  bool exact = false;
  std::vector<Entry> entries;

  static HcaSpec parse(const std::string& text);
  bool empty() const { return entries.empty(); }
  // Whether `device`:`port` is selected by this spec.
  bool matches(const std::string& device, int port) const;
};

}  // namespace uccl
