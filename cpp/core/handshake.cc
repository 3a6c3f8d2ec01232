#include "core/handshake.h"

#include "uccl/work.h"  // kMaxTransports

namespace uccl {

std::string validate_hello(const HelloHeader& h, const uint8_t* secret, uint64_t comm_id, int my_rank, int size) {
  if (h.magic != kHelloMagic) return "bad magic (not a uccl peer)";
  if (h.version != kProtocolVersion)
    return "protocol version " + std::to_string(h.version) + ", expected " + std::to_string(kProtocolVersion);
  if (secret && std::memcmp(h.secret, secret, kSecretBytes) != 0) return "wrong job secret";
  if (h.comm_id != comm_id) return "addressed to another communicator";
  if (h.to_rank != my_rank) return "addressed to rank " + std::to_string(h.to_rank);
  const bool notice = h.flags == kHelloFailed;
  if (h.from_rank < 0 || h.from_rank >= size || h.from_rank == my_rank || (h.from_rank > my_rank && !notice))
    return "invalid source rank " + std::to_string(h.from_rank);
  if (notice && (h.channel != 0 || h.nchannels != 1 || h.offer_bytes > kMaxNoticeBytes)) return "invalid failure notice";
  if (h.transport >= kMaxTransports) return "unknown transport " + std::to_string(h.transport);
  if (h.nchannels == 0 || h.nchannels > 64 || h.channel >= h.nchannels) return "invalid channel numbers";
  if (h.offer_bytes > kMaxOfferBytes) return "offer too large";
  if (!valid_staging_chunk(h.staging_chunk)) return "invalid staging chunk " + std::to_string(h.staging_chunk);
  return "";
}

bool valid_staging_chunk(uint64_t chunk) {
  return chunk == 0 || (chunk % 64 == 0 && chunk >= 4096 && chunk <= (uint64_t{1} << 40));
}

Greeting make_greeting() {
  Greeting g{};
  g.magic = kGreetingMagic;
  g.version = kProtocolVersion;
  random_bytes(g.nonce, kNonceBytes);
  return g;
}

std::string validate_greeting(const Greeting& g) {
  if (g.magic != kGreetingMagic) return "no greeting (is the peer a uccl rank with a job key?)";
  if (g.version != kProtocolVersion)
    return "protocol version " + std::to_string(g.version) + ", expected " + std::to_string(kProtocolVersion);
  return "";
}

std::string hello_mac(const std::string& key, const uint8_t* greeting_nonce, const HelloHeader& h) {
  std::string data(reinterpret_cast<const char*>(greeting_nonce), kNonceBytes);
  data.append(reinterpret_cast<const char*>(&h), sizeof h);
  return hmac_sha256(key, "uccl hello", data);
}

std::string ack_mac(const std::string& key, const uint8_t* greeting_nonce, const HelloHeader& h, const AckHeader& a) {
  std::string data(reinterpret_cast<const char*>(greeting_nonce), kNonceBytes);
  data.append(reinterpret_cast<const char*>(h.secret), kSecretBytes);  // the connecting side's nonce
  data.append(reinterpret_cast<const char*>(&h.comm_id), sizeof h.comm_id);
  data.append(reinterpret_cast<const char*>(&a), sizeof a);
  return hmac_sha256(key, "uccl ack", data);
}

}  // namespace uccl
