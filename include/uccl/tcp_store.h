// uccl's own TCP store. One process (rank 0 by convention) runs the server on a background
// thread; every rank (the server's own included) talks to it through a client.
//
// Protocol: length-prefixed binary requests over one TCP connection per client
// (SET key value | GET key timeout | WAIT keys timeout | ADD key delta | CHECK key), after a
// challenge-response over the job key when there is one (cpp/bootstrap/auth.h). The server
// answers GET/WAIT when the keys appear, so clients do not poll. Every client call carries a
// deadline; a server that vanishes becomes a kRemoteError, never a hang.
#pragma once

#include <memory>
#include <string>

#include "uccl/store.h"

namespace uccl {

class TcpStoreServer {
 public:
  // Binds host:port (port 0 = ephemeral) and starts serving on a background thread. With the
  // job key of this process (UCCL_JOB_KEY / UCCL_JOB_KEY_FILE), or the one given ("" =
  // keyless), clients are served only after they proved the key by challenge-response.
  static Result<std::unique_ptr<TcpStoreServer>> start(const std::string& host, int port);
  static Result<std::unique_ptr<TcpStoreServer>> start(const std::string& host, int port, const std::string& job_key);
  virtual ~TcpStoreServer() = default;
  virtual int port() const = 0;
};

// True while a TcpStoreServer of this process listens on `port`.
bool tcp_store_port_served_here(int port);

// Connects to host:port, retrying until timeout_s (the server may start after the clients).
// With a job key (this process's, or the one given), client and server prove it to each other
// first; a store with another key, or none, is refused with Code::kUnauthenticated.
Result<std::shared_ptr<Store>> connect_tcp_store(const std::string& host, int port, double timeout_s);
Result<std::shared_ptr<Store>> connect_tcp_store(const std::string& host, int port, double timeout_s,
                                                 const std::string& job_key);

}  // namespace uccl
