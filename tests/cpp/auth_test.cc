// The job key's building blocks (bootstrap/auth.h) and the authenticated TCP store: HMAC-SHA256
// against RFC 4231's vectors, constant-time compare, and a keyed store that serves clients
// with the key, refuses a wrong key, a keyless client and raw requests (no data, no write),
// while a keyless store refuses a client that authenticates.
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "test_util.h"
#include "base/net.h"
#include "bootstrap/auth.h"
#include "bootstrap/tcp_store_wire.h"
#include "uccl/tcp_store.h"

using namespace uccl;

namespace {
std::string hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string h;
  for (unsigned char c : s) h += std::string{d[c >> 4], d[c & 15]};
  return h;
}
const std::string kKey = "job-key-0123456789-abcdef";
}  // namespace

TEST_CASE("auth: HMAC-SHA256 matches RFC 4231 (label and data are concatenated)") {
  // Test case 2: key "Jefe", data "what do ya want for nothing?".
  CHECK(hex(hmac_sha256("Jefe", "what do ya want ", "for nothing?")) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 1: 20 bytes of 0x0b, "Hi There".
  CHECK(hex(hmac_sha256(std::string(20, '\x0b'), "", "Hi There")) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  std::string a = hmac_sha256("k", "l", "d"), b = a;
  CHECK(equal_ct(a.data(), b.data(), a.size()));
  b[31] ^= 1;
  CHECK(!equal_ct(a.data(), b.data(), a.size()));
  uint8_t n1[32], n2[32];
  random_bytes(n1, 32);
  random_bytes(n2, 32);
  CHECK(std::memcmp(n1, n2, 32) != 0);
}

TEST_CASE("auth: a keyed store serves clients with the key and refuses the others, typed") {
  auto server = TcpStoreServer::start("127.0.0.1", 0, kKey);
  REQUIRE_OK(server.status());
  const int port = server.value()->port();
  auto good = connect_tcp_store("127.0.0.1", port, 5, kKey);
  REQUIRE_OK(good.status());
  CHECK_OK(good.value()->set("uccl/secret", "the-job-secret"));
  auto v = good.value()->get("uccl/secret", 1);
  REQUIRE_OK(v.status());
  CHECK(v.value() == "the-job-secret");

  auto wrong = connect_tcp_store("127.0.0.1", port, 5, "another-key-0123456789");
  REQUIRE(!wrong.ok());
  CHECK(wrong.status().code() == Code::kUnauthenticated);
  CHECK(wrong.status().message().find("wrong job key") != std::string::npos);

  // A client without a key: connected, but its first request is refused and nothing executes.
  auto keyless = connect_tcp_store("127.0.0.1", port, 5, "");
  REQUIRE_OK(keyless.status());
  Status s = keyless.value()->set("stranger", "was here");
  CHECK(s.code() == Code::kUnauthenticated);
  CHECK(s.message().find("requires the job key") != std::string::npos);
  CHECK(keyless.value()->get("uccl/secret", 0.1).status().code() == Code::kUnauthenticated);
  CHECK(good.value()->get("stranger", 0.2).status().code() == Code::kTimeout);  // not written

  // Raw bytes: a well-formed GET of the secret gets a denial and nothing of the value.
  SockAddr addr = parse_address("127.0.0.1", port).value();
  auto fd = connect_to(addr, now_s() + 5);
  REQUIRE_OK(fd.status());
  store_wire::RequestHeader h;
  h.op = static_cast<uint8_t>(store_wire::Op::kGet);
  h.nstrings = 1;
  const std::string key = "uccl/secret";
  uint32_t len = static_cast<uint32_t>(key.size());
  std::string msg(reinterpret_cast<const char*>(&h), sizeof h);
  msg.append(reinterpret_cast<const char*>(&len), 4);
  msg += key;
  REQUIRE_OK(send_all(fd.value(), msg.data(), msg.size(), now_s() + 5));
  std::string got;
  char buf[4096];
  for (double end = now_s() + 5; now_s() < end;) {
    ssize_t n = recv(fd.value(), buf, sizeof buf, 0);
    if (n <= 0) break;  // the server closed after its denial
    got.append(buf, static_cast<size_t>(n));
  }
  close(fd.value());
  REQUIRE(got.size() >= sizeof(store_wire::ReplyHeader));
  store_wire::ReplyHeader rh;
  std::memcpy(&rh, got.data(), sizeof rh);
  CHECK(rh.status == static_cast<uint8_t>(store_wire::ReplyStatus::kDenied));
  CHECK(got.find("the-job-secret") == std::string::npos);
  // The store still serves its legitimate client.
  CHECK_OK(good.value()->set("after", "1"));
  CHECK(good.value()->get("after", 1).value() == "1");
}

TEST_CASE("auth: a keyless store refuses a client that authenticates (clear error, no hang)") {
  auto server = TcpStoreServer::start("127.0.0.1", 0, "");
  REQUIRE_OK(server.status());
  const double t0 = now_s();
  auto c = connect_tcp_store("127.0.0.1", server.value()->port(), 5, kKey);
  REQUIRE(!c.ok());
  CHECK(c.status().code() == Code::kUnauthenticated);
  CHECK(c.status().message().find("has no job key") != std::string::npos);
  CHECK(now_s() - t0 < 3);
  auto plain = connect_tcp_store("127.0.0.1", server.value()->port(), 5, "");
  REQUIRE_OK(plain.status());
  CHECK_OK(plain.value()->set("k", "v"));
}
