// uccl's own TCP store. One process (rank 0 by convention) runs the server on a background
// thread; every rank (the server's own included) talks to it through a client.
//
// Protocol: length-prefixed binary requests over one TCP connection per client
// (SET key value | GET key timeout | WAIT keys timeout | ADD key delta | CHECK key). The server
// answers GET/WAIT when the keys appear, so clients do not poll. Every client call carries a
// deadline; a server that vanishes becomes a kRemoteError, never a hang.
#pragma once

#include <memory>
#include <string>

#include "uccl/store.h"

namespace uccl {

class TcpStoreServer {
 public:
  // Binds host:port (port 0 = ephemeral) and starts serving on a background thread.
  static Result<std::unique_ptr<TcpStoreServer>> start(const std::string& host, int port);
  virtual ~TcpStoreServer() = default;
  virtual int port() const = 0;
};

// True while a TcpStoreServer of this process listens on `port`.
bool tcp_store_port_served_here(int port);

// Connects to host:port, retrying until timeout_s (the server may start after the clients).
Result<std::shared_ptr<Store>> connect_tcp_store(const std::string& host, int port, double timeout_s);

}  // namespace uccl
