// Hostile bytes against the job key (bootstrap/auth.h): every input goes, by a fresh TCP client
// without the key, either to a keyed TCP store (first byte even) or to a keyed rank's listening
// port (first byte odd). Neither may crash, hang or leak a connection; the store may never
// answer with a value nor let a key be written, and the rank may never admit the connection
// (the MAC covers a nonce the fuzzer never sees: it cannot be learned, unlike the keyless secret).
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "uccl/tcp_store.h"
#include "base/config.h"
#include "base/net.h"
#include "core/connection_manager.h"

using namespace uccl;

namespace {
const char* kKey = "fuzz-job-key-0123456789abcdef";
const std::string kCanary = "CANARY-VALUE-7f3a9c";

struct World {
  std::unique_ptr<TcpStoreServer> server;
  std::shared_ptr<Store> store;
  std::unique_ptr<ConnectionManager> cm;
  SockAddr rank_addr, store_addr;
};

World& world() {
  static World* w = [] {
    setenv("UCCL_SOCKET_IFNAME", "lo", 1);
    setenv("UCCL_DEBUG", "NONE", 1);
    setenv("UCCL_JOB_KEY", kKey, 1);  // before anything reads it: the process is keyed
    auto* w = new World;
    w->server = TcpStoreServer::start("127.0.0.1", 0).take();
    w->store = connect_tcp_store("127.0.0.1", w->server->port(), 10).take();
    w->store->set("uccl/secret", std::string(24, '\x5a') + std::string(1, '\0'));
    w->store->set("canary", kCanary);
    w->cm = std::make_unique<ConnectionManager>(1, 2, w->store, CommOptions{}, 10);
    if (!w->cm->init().ok()) std::abort();
    const std::string& l = w->cm->my_info().listen.at(0);
    w->rank_addr = parse_address(l.substr(0, l.rfind(':')), std::atoi(l.c_str() + l.rfind(':') + 1)).take();
    w->store_addr = parse_address("127.0.0.1", w->server->port()).take();
    return w;
  }();
  return *w;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  World& w = world();
  const bool to_store = size == 0 || data[0] % 2 == 0;
  if (size > 0) ++data, --size;
  auto fd = connect_to(to_store ? w.store_addr : w.rank_addr, now_s() + 5);
  if (!fd.ok()) std::abort();
  send_all(fd.value(), data, size, now_s() + 5);  // may fail once the server refused: fine
  ::shutdown(fd.value(), SHUT_WR);
  const double deadline = now_s() + 5;
  std::string got;
  if (to_store) {
    char buf[4096];
    for (;;) {  // the server answers and closes (or closes at once): never a hang
      ssize_t n = recv(fd.value(), buf, sizeof buf, 0);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
      if (now_s() > deadline) __builtin_trap();
    }
    if (got.find(kCanary) != std::string::npos) __builtin_trap();  // a value reached a stranger
    auto v = w.store->get("canary", 1);
    if (!v.ok() || v.value() != kCanary) __builtin_trap();  // a stranger wrote
  } else {
    do {
      w.cm->progress();
    } while (w.cm->pending_handshakes() > 0 && now_s() < deadline);
    if (w.cm->pending_handshakes() > 0) __builtin_trap();  // a client that stopped sending must be dropped
    if (w.cm->endpoints()[0]) __builtin_trap();            // nobody gets in without the key
  }
  ::close(fd.value());
  return 0;
}
