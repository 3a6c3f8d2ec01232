// PeerInfo::parse reads what other ranks (or whoever can write the store) published.
#include <string>

#include "topology/peer_info.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = uccl::PeerInfo::parse(std::string(reinterpret_cast<const char*>(data), size));
  if (r.ok()) {
    // Whatever parses must survive a round trip.
    auto again = uccl::PeerInfo::parse(r.value().serialize());
    if (!again.ok() || again.value().serialize() != r.value().serialize()) __builtin_trap();
  }
  return 0;
}
