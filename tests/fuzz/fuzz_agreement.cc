// The shrink agreement's messages (core/agreement.h) as they arrive from the network: a whole
// frame (header, body, MAC) with the communicator's key, and the body parser on its own (which
// the MAC would otherwise shield from the fuzzer). Whatever parses must survive a round trip.
#include <string>

#include "core/agreement.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const std::string key = "fuzz-key-0123456789abcdef";
  int from = -1;
  (void)uccl::parse_agree_frame(key, 0x5A5A5A5A5A5A5A5Aull, 1, 8, in, &from);
  auto m = uccl::parse_agree_body(in, 8);
  if (m.ok()) {
    const std::string text = uccl::encode_agree_body(m.value());
    auto again = uccl::parse_agree_body(text, 8);
    if (!again.ok() || uccl::encode_agree_body(again.value()) != text) __builtin_trap();
    // A frame made from it parses back (the MAC is right by construction).
    uccl::AgreeMsg msg = m.value();
    msg.type = uccl::AgreeType::kReply;
    const std::string f = uccl::encode_agree_frame(key, 7, 2, 1, msg);
    if (!uccl::parse_agree_frame(key, 7, 1, 8, f, &from).ok() || from != 2) __builtin_trap();
  }
  return 0;
}
