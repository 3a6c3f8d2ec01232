// The passive side's assembly of a multi-socket connection (core/connection_accept.cc): the
// sockets' hellos are filed under the connecting rank until all came. A real ConnectionManager
// (rank 1) accepts, and raw sockets play rank 0. An assembly some of whose sockets never come
// (the peer died between its hellos) is dropped at its deadline and its sockets closed, after
// which a complete connection goes through; a socket that does not fit the connection being
// assembled (another socket count, a channel taken) is refused without disturbing it; and a hello
// after the connection exists is refused without leaving an assembly behind. And the staging
// offers of the handshake (core/handshake.h): the connecting side's chunk in its hello splits
// the pair on the accepting side, which answers its own offer in the ack; an offer that no
// chunk rule allows is refused.
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "test_util.h"
#include "base/net.h"
#include "core/connection_manager.h"
#include "core/handshake.h"
#include "uccl/tcp_store.h"

using namespace uccl;

namespace {
constexpr uint8_t kSecret = 0x5a;

struct Passive {
  std::unique_ptr<TcpStoreServer> server;
  std::unique_ptr<ConnectionManager> cm;
  SockAddr addr;
};

// Rank 1 of 2, the accepting side; `timeout_s` bounds an assembly (min(timeout, 30 s)).
std::unique_ptr<Passive> make_passive(double timeout_s) {
  setenv("UCCL_SOCKET_IFNAME", "lo", 1);
  auto p = std::make_unique<Passive>();
  p->server = TcpStoreServer::start("127.0.0.1", 0).take();
  auto store = connect_tcp_store("127.0.0.1", p->server->port(), 10).take();
  // What rank 0 publishes: the secret (16), the communicator id (8), "serves the store" (1).
  store->set("uccl/secret", std::string(24, static_cast<char>(kSecret)) + std::string(1, '\0'));
  p->cm = std::make_unique<ConnectionManager>(1, 2, store, CommOptions{}, timeout_s);
  REQUIRE_OK(p->cm->init());
  PeerInfo zero = p->cm->my_info();
  zero.rank = 0;
  store->set("uccl/peer/0", zero.serialize());
  const std::string& l = p->cm->my_info().listen.at(0);
  p->addr = parse_address(l.substr(0, l.rfind(':')), std::atoi(l.c_str() + l.rfind(':') + 1)).take();
  return p;
}

// Rank 0's socket `ch` of a tcp connection of `n` sockets, its hello sent (offering `staging`
// bytes of staging chunk on channel 0).
int dial(Passive& p, uint32_t ch, uint32_t n, uint64_t staging = 0) {
  auto fd = connect_to(p.addr, now_s() + 5);
  REQUIRE_OK(fd.status());
  HelloHeader h{};
  h.magic = kHelloMagic;
  h.version = kProtocolVersion;
  std::memset(h.secret, kSecret, kSecretBytes);
  std::memset(&h.comm_id, kSecret, sizeof h.comm_id);
  h.from_rank = 0;
  h.to_rank = 1;
  h.transport = static_cast<uint8_t>(TransportKind::kTcp);
  h.channel = ch;
  h.nchannels = n;
  const std::string offer = ch == 0 ? "tcp1" : "";
  h.offer_bytes = static_cast<uint32_t>(offer.size());
  h.staging_chunk = ch == 0 ? staging : 0;
  std::string msg(reinterpret_cast<const char*>(&h), sizeof h);
  msg += offer;
  REQUIRE_OK(send_all(fd.value(), msg.data(), msg.size(), now_s() + 5));
  return fd.value();
}

// Drives the manager until `done` or `seconds` passed.
template <class F>
bool drive(Passive& p, double seconds, F done) {
  const double end = now_s() + seconds;
  while (now_s() < end) {
    p.cm->progress();
    if (done()) return true;
    usleep(1000);
  }
  return done();
}

// 0: the peer closed the socket; 1: bytes are waiting; -1: neither yet.
int socket_state(int fd) {
  char c;
  ssize_t r = ::recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK);
  return r == 0 ? 0 : r > 0 ? 1 : -1;
}

// Reads the ack on fd: its status (0 = accepted); *out gets the whole header.
uint32_t read_ack(int fd, AckHeader* out = nullptr) {
  AckHeader a{};
  size_t got = 0;
  const double end = now_s() + 5;
  while (got < sizeof a && now_s() < end) {
    ssize_t r = ::recv(fd, reinterpret_cast<char*>(&a) + got, sizeof a - got, MSG_DONTWAIT);
    if (r > 0) got += r;
    else if (r == 0) break;
    else usleep(1000);
  }
  REQUIRE(got == sizeof a);
  CHECK(a.magic == kAckMagic);
  if (out) *out = a;
  return a.status;
}
}  // namespace

TEST_CASE("assembly: a connection short of sockets is dropped at its deadline, then a whole one goes through") {
  auto p = make_passive(1.0);
  const int lone = dial(*p, 0, 2);  // announces 2 sockets, opens 1
  REQUIRE(drive(*p, 5, [&] { return p->cm->assembling_connections() == 1; }));
  CHECK(!p->cm->endpoints()[0]);
  const double t0 = now_s();
  REQUIRE(drive(*p, 5, [&] { return p->cm->assembling_connections() == 0; }));
  CHECK(now_s() - t0 < 2.5);  // the deadline is min(timeout, 30 s) = 1 s from the first socket
  CHECK(socket_state(lone) == 0);  // its socket was closed
  ::close(lone);

  const int a = dial(*p, 0, 2), b = dial(*p, 1, 2);
  REQUIRE(drive(*p, 5, [&] { return p->cm->endpoints()[0] != nullptr; }));
  CHECK(read_ack(a) == 0);
  CHECK(read_ack(b) == 0);
  CHECK(p->cm->assembling_connections() == 0);
  ::close(a);
  ::close(b);
}

TEST_CASE("assembly: a socket that does not fit is refused and the connection still assembles") {
  auto p = make_passive(10.0);
  const int a = dial(*p, 0, 2);
  REQUIRE(drive(*p, 5, [&] { return p->cm->assembling_connections() == 1; }));
  const int other_count = dial(*p, 1, 3);  // another connection's socket count
  const int taken = dial(*p, 0, 2);        // channel 0 is there already
  REQUIRE(drive(*p, 5, [&] { return socket_state(other_count) == 0 && socket_state(taken) == 0; }));
  CHECK(p->cm->assembling_connections() == 1);
  CHECK(!p->cm->endpoints()[0]);
  const int b = dial(*p, 1, 2);
  REQUIRE(drive(*p, 5, [&] { return p->cm->endpoints()[0] != nullptr; }));
  CHECK(read_ack(a) == 0);
  CHECK(read_ack(b) == 0);
  for (int fd : {a, b, other_count, taken}) ::close(fd);
}

TEST_CASE("assembly: a hello once connected is refused and leaves nothing behind") {
  auto p = make_passive(10.0);
  const int a = dial(*p, 0, 1);
  REQUIRE(drive(*p, 5, [&] { return p->cm->endpoints()[0] != nullptr; }));
  CHECK(read_ack(a) == 0);
  const int late = dial(*p, 0, 2);
  REQUIRE(drive(*p, 5, [&] { return socket_state(late) == 0; }));
  CHECK(p->cm->assembling_connections() == 0);  // (an empty assembly kept listeners busy before)
  CHECK(p->cm->pending_handshakes() == 0);
  ::close(a);
  ::close(late);
}

TEST_CASE("staging offers: the hello's chunk splits the pair, the ack answers ours, an impossible one is refused") {
  unsetenv("UCCL_STAGED");  // auto: this process has no device memory, so it offers none
  auto p = make_passive(10.0);
  const int bad = dial(*p, 0, 1, 100);  // not a multiple of 64, below 4 KiB
  REQUIRE(drive(*p, 5, [&] { return socket_state(bad) == 0; }));
  CHECK(!p->cm->endpoints()[0]);
  ::close(bad);
  const int a = dial(*p, 0, 1, 64 << 10);
  REQUIRE(drive(*p, 5, [&] { return p->cm->endpoints()[0] != nullptr; }));
  AckHeader ack{};
  CHECK(read_ack(a, &ack) == 0);
  CHECK(ack.staging_chunk == 0);
  CHECK((ack.flags & kAckStagingShared) != 0);  // UCCL_STAGED_SHARED=on by default
  // Either side's offer splits the pair: rank 0 offered 64 KiB.
  const std::string d = p->cm->endpoints()[0]->describe();
  CHECK_MESSAGE(d.rfind("staged (chunks of 65536 bytes) over tcp", 0) == 0, d);
  ::close(a);
}

TEST_CASE("staging offers: a chunk the rules allow") {
  CHECK(valid_staging_chunk(0));
  CHECK(valid_staging_chunk(4096));
  CHECK(valid_staging_chunk(8u << 20));
  CHECK(valid_staging_chunk(uint64_t{1} << 40));
  CHECK(!valid_staging_chunk(64));
  CHECK(!valid_staging_chunk(4096 + 8));
  CHECK(!valid_staging_chunk((uint64_t{1} << 40) + 64));
  CHECK(!valid_staging_chunk(~uint64_t{0}));
}
