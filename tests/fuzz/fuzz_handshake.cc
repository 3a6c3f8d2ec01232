// Hostile bytes on a rank's listening port: every input is sent by a fresh TCP client to a
// real ConnectionManager, which must refuse it (the secret cannot be guessed), never crash,
// and drop the connection as soon as the client stops sending (no hang, no leak), or, for an
// admitted socket of a connection whose other sockets never come, at the assembly's deadline.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "uccl/tcp_store.h"
#include "base/config.h"
#include "core/connection_manager.h"
#include "base/net.h"

using namespace uccl;

namespace {
struct World {
  std::unique_ptr<TcpStoreServer> server;
  std::unique_ptr<ConnectionManager> cm;
  SockAddr addr;
  bool admitted = false;  // a fuzz input carrying the secret got a connection in
};

World& world() {
  static World* w = [] {
    setenv("UCCL_SOCKET_IFNAME", "lo", 1);
    setenv("UCCL_DEBUG", "NONE", 1);
    auto* w = new World;
    w->server = TcpStoreServer::start("127.0.0.1", 0).take();
    auto store = connect_tcp_store("127.0.0.1", w->server->port(), 10).take();
    // What rank 0 would publish: secret (16), communicator id (8), "serves the store" (1).
    store->set("uccl/secret", std::string(24, '\x5a') + std::string(1, '\0'));
    // Rank 1 accepts from rank 0. A short timeout: a connection announced with more sockets
    // than the input opened is dropped at min(timeout, 30 s), and each input waits for that.
    w->cm = std::make_unique<ConnectionManager>(1, 2, store, CommOptions{}, 1.0);
    if (!w->cm->init().ok()) std::abort();
    // And rank 0's PeerInfo, which a real rank 0 publishes before it connects: a fuzz input that
    // learned the secret gets in, and the connection's set-up reads it (staging offers).
    PeerInfo zero = w->cm->my_info();
    zero.rank = 0;
    store->set("uccl/peer/0", zero.serialize());
    const std::string& l = w->cm->my_info().listen.at(0);
    w->addr = parse_address(l.substr(0, l.rfind(':')), std::atoi(l.c_str() + l.rfind(':') + 1)).take();
    return w;
  }();
  return *w;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  World& w = world();
  const uint64_t accepted = w.cm->sockets_accepted();
  auto fd = connect_to(w.addr, now_s() + 5);
  if (!fd.ok()) std::abort();
  send_all(fd.value(), data, size, now_s() + 5);  // may fail once the server refused: fine
  ::shutdown(fd.value(), SHUT_WR);
  // The listener is polled only now and then: first until it took this connection (else a
  // later input's progress would handle it, and an admission would look like that input's).
  const double deadline = now_s() + 5;
  do {
    w.cm->progress();
  } while ((w.cm->sockets_accepted() == accepted || w.cm->pending_handshakes() > 0) && now_s() < deadline);
  if (w.cm->sockets_accepted() == accepted) __builtin_trap();  // never accepted
  if (w.cm->pending_handshakes() > 0) __builtin_trap();  // a client that stopped sending must be dropped
  // An admitted hello that announced more sockets than came waits in an assembly: it must be
  // dropped at its deadline (else the next inputs would be filed under it).
  const double drop_by = now_s() + 3;
  while (w.cm->assembling_connections() > 0 && now_s() < drop_by) w.cm->progress();
  if (w.cm->assembling_connections() > 0) __builtin_trap();
  // Nobody may get in without the secret. The fuzzer can learn this harness's fixed secret
  // (comparison tracing) and then legitimately connect: that is allowed, once.
  static const std::string secret(16, '\x5a');
  const bool knows_secret =
      memmem(data, size, secret.data(), secret.size()) != nullptr;
  if (w.cm->endpoints()[0] && !knows_secret && !w.admitted) __builtin_trap();
  if (w.cm->endpoints()[0]) w.admitted = true;
  ::close(fd.value());
  return 0;
}
