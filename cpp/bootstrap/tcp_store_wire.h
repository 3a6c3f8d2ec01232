// Wire format of the TCP store (internal to tcp_store_server.cc / tcp_store_client.cc).
//
// Request : RequestHeader, then `nstrings` times { uint32 length, bytes }.
// Reply   : ReplyHeader, then `payload_bytes` bytes.
// Fields are in host byte order: the store serves one job, whose ranks share an architecture
// (every platform uccl targets is little-endian). The magic in front of every request lets the
// server drop a stray connection (a port scanner, a wrong service) at its first bytes instead
// of misreading it as a huge length.
//
// With a job key (bootstrap/auth.h) every connection starts with a challenge-response before
// any request: the client sends AuthHello (its nonce), the server answers AuthChallenge (its
// nonce and its proof HMAC(key, "uccl store server" || client nonce || server nonce)), the
// client checks that proof and sends AuthProof (HMAC(key, "uccl store client" || same)); only
// then does the server read requests. A server refuses what it cannot accept with a reply of
// status kDenied (the client then fails with Code::kUnauthenticated): a request sent without
// authenticating to a keyed store, a wrong proof, an AuthHello to a keyless store.
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

constexpr uint32_t kAuthHelloMagic = 0x41534355;      // "UCSA"
constexpr uint32_t kAuthChallengeMagic = 0x43534355;  // "UCSC"
constexpr uint32_t kAuthProofMagic = 0x50534355;      // "UCSP"
constexpr uint32_t kAuthVersion = 1;
constexpr const char* kStoreServerLabel = "uccl store server";
constexpr const char* kStoreClientLabel = "uccl store client";

struct AuthHello {
  uint32_t magic = kAuthHelloMagic;
  uint32_t version = kAuthVersion;
  uint8_t nonce[32] = {};
};
struct AuthChallenge {
  uint32_t magic = kAuthChallengeMagic;
  uint32_t pad = 0;
  uint8_t nonce[32] = {};
  uint8_t mac[32] = {};
};
struct AuthProof {
  uint32_t magic = kAuthProofMagic;
  uint32_t pad = 0;
  uint8_t mac[32] = {};
};
static_assert(sizeof(AuthHello) == 40 && sizeof(AuthChallenge) == 72 && sizeof(AuthProof) == 40, "wire layout");

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
  kDenied = 3,   // authentication refused (payload: why); the server closes the connection
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
