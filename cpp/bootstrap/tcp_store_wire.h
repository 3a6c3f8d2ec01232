// Wire format of the TCP store (internal to tcp_store_server.cc / tcp_store_client.cc).
//
// Request : RequestHeader, then `nstrings` times { uint32 length, bytes }.
// Reply   : ReplyHeader, then `payload_bytes` bytes.
// Fields are in host byte order: the store serves one job, whose ranks share an architecture
// (every platform uccl targets is little-endian). The magic in front of every request lets the
// server drop a stray connection (a port scanner, a wrong service) at its first bytes instead
// of misreading it as a huge length.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace uccl {
namespace store_wire {

constexpr uint32_t kRequestMagic = 0x54534355;  // "UCST" read as little-endian bytes
constexpr uint32_t kReplyMagic = 0x52534355;    // "UCSR"

// Limits that tell garbage from a request: nobody publishes a GiB through bootstrap.
constexpr uint32_t kMaxStrings = 1 << 16;
constexpr uint64_t kMaxRequestBytes = 1ull << 30;

enum class Op : uint8_t {
  kSet = 1,    // strings: key, value
  kGet = 2,    // strings: key;  arg: timeout in ms (server replies kTimeout when it passes)
  kWait = 3,   // strings: keys; arg: timeout in ms
  kAdd = 4,    // strings: key;  arg: delta; reply value: the new integer
  kCheck = 5,  // strings: keys; reply value: 1 if all exist, else 0
};

enum class ReplyStatus : uint8_t {
  kOk = 0,
  kTimeout = 1,  // payload: the first key still missing
  kError = 2,    // payload: message
};

struct RequestHeader {
  uint32_t magic = kRequestMagic;
  uint8_t op = 0;
  uint8_t pad[3] = {0, 0, 0};
  int64_t arg = 0;
  uint32_t nstrings = 0;
  uint32_t pad2 = 0;
};
static_assert(sizeof(RequestHeader) == 24, "wire layout");

struct ReplyHeader {
  uint32_t magic = kReplyMagic;
  uint8_t status = 0;
  uint8_t pad[3] = {0, 0, 0};
  int64_t value = 0;
  uint64_t payload_bytes = 0;
};
static_assert(sizeof(ReplyHeader) == 24, "wire layout");

}  // namespace store_wire
}  // namespace uccl
