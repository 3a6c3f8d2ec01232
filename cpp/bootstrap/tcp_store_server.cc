// The TCP store server: one background thread, poll() over the listener, every client and an
// eventfd used to stop it.
//
// Why one thread and poll: bootstrap traffic is a few small messages per rank, so a single
// thread serves thousands of clients without locks; a GET or WAIT whose keys are missing parks
// the client (no reply, no polling by the client) until a SET/ADD makes the keys appear or its
// timeout passes, which the loop turns into poll()'s timeout. A client that sends garbage is
// logged and dropped; the others never notice. With a job key, a client is served only after
// it proved the key (tcp_store_wire.h); until then nothing it sends is executed and nothing of
// the store's content is sent to it. A SET/ADD is answered before the clients it wakes are: a
// waiter may leave the process at once and take the server with it (acknowledge_then_wake).
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "uccl/tcp_store.h"
#include "bootstrap/auth.h"
#include "bootstrap/tcp_store_wire.h"
#include "base/log.h"
#include "base/net.h"
#include "base/thread_name.h"

namespace uccl {
namespace {

using namespace store_wire;

// Where a client stands with authentication (only kOpen clients have requests executed).
enum class Auth : uint8_t { kOpen, kHello, kProof };

struct Client {
  int fd = -1;
  Auth auth = Auth::kOpen;
  uint8_t client_nonce[kNonceBytes] = {};
  uint8_t server_nonce[kNonceBytes] = {};
  std::string peer;
  std::string in;         // bytes received, not yet parsed
  std::string out;        // reply bytes not yet written
  size_t out_pos = 0;
  bool eof = false;       // the client closed its side; served requests still get answered
  // A parked GET/WAIT: answered when all keys exist or at the deadline.
  bool parked = false;
  Op parked_op = Op::kGet;
  std::vector<std::string> parked_keys;
  double parked_deadline = 0;
};

struct Request {
  Op op = Op::kSet;
  int64_t arg = 0;
  std::vector<std::string> strings;
};

enum class Parse { kIncomplete, kComplete, kGarbage };

std::mutex g_served_mu;
std::multiset<int> g_served_ports;  // ports served by TcpStoreServers of this process

class TcpStoreServerImpl : public TcpStoreServer {
 public:
  TcpStoreServerImpl(int listen_fd, int wake_fd, int port, std::string key)
      : listen_fd_(listen_fd), wake_fd_(wake_fd), port_(port), key_(std::move(key)) {
    {
      std::lock_guard<std::mutex> lock(g_served_mu);
      g_served_ports.insert(port_);
    }
    thread_ = std::thread([this] {
      name_this_thread("uccl-store");
      loop();
    });
  }
  ~TcpStoreServerImpl() override {
    {
      std::lock_guard<std::mutex> lock(g_served_mu);
      g_served_ports.erase(g_served_ports.find(port_));
    }
    stop_.store(true);
    uint64_t one = 1;
    ssize_t rc = write(wake_fd_, &one, sizeof one);
    (void)rc;
    thread_.join();
    for (auto& c : clients_) close(c->fd);
    close(listen_fd_);
    close(wake_fd_);
  }
  int port() const override { return port_; }

 private:
  void loop();
  void accept_clients();
  // Reads what is available; false if the client is gone or must be dropped.
  bool read_client(Client* c);
  bool flush_client(Client* c);
  bool process_input(Client* c);
  // Reads the client's AuthHello / AuthProof; Parse::kComplete once it is kOpen. kGarbage
  // means drop it (a denial, when one is due, is already queued in c->out).
  Parse authenticate(Client* c, std::string* why);
  void deny(Client* c, const std::string& why);
  Parse parse(Client* c, Request* req, std::string* why);
  void execute(Client* c, Request& req);
  void reply(Client* c, ReplyStatus st, int64_t value, const std::string& payload);
  // Answers parked clients whose keys now all exist (after a SET/ADD) or whose time is up.
  void wake_parked(double now);
  // After a SET/ADD from c: c's reply is written first, then the parked clients are woken.
  void acknowledge_then_wake(Client* c);
  const std::string* missing_key(const std::vector<std::string>& keys) const;
  void drop(size_t index, const char* why);

  int listen_fd_, wake_fd_, port_;
  const std::string key_;  // "" = keyless: every client is served
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<std::unique_ptr<Client>> clients_;
  std::map<std::string, std::string> data_;
};

void TcpStoreServerImpl::loop() {
  std::vector<pollfd> fds;
  while (!stop_.load()) {
    double now = now_s(), next_deadline = -1;
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (auto& c : clients_) {
      fds.push_back({c->fd, static_cast<short>(POLLIN | (c->out_pos < c->out.size() ? POLLOUT : 0)), 0});
      if (c->parked && (next_deadline < 0 || c->parked_deadline < next_deadline)) next_deadline = c->parked_deadline;
    }
    int timeout_ms = next_deadline < 0 ? -1 : static_cast<int>(std::ceil(std::max(0.0, next_deadline - now) * 1000));
    int rc = poll(fds.data(), fds.size(), timeout_ms);
    if (rc < 0 && errno != EINTR) {
      UCCL_WARN("tcp store server: poll failed: %s", std::strerror(errno));
      return;
    }
    if (stop_.load()) return;
    if (fds[1].revents & POLLIN) accept_clients();
    // Clients accepted just now are not in `fds`; they are served from the next iteration.
    size_t polled = fds.size() - 2;
    for (size_t i = polled; i-- > 0;) {
      Client* c = clients_[i].get();
      short ev = fds[i + 2].revents;
      if (ev & (POLLIN | POLLHUP | POLLERR)) {
        // Requests that arrived just before a close are still executed (a SET must not be lost).
        if (!read_client(c) || !process_input(c) || c->eof) {
          drop(i, nullptr);
          continue;
        }
      }
      if ((ev & POLLOUT) && !flush_client(c)) drop(i, "write failed");
    }
    wake_parked(now_s());
  }
}

void TcpStoreServerImpl::accept_clients() {
  for (;;) {
    SockAddr a;
    a.len = sizeof a.ss;
    int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&a.ss), &a.len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
        UCCL_WARN("tcp store server: accept failed: %s", std::strerror(errno));
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;
    }
    auto c = std::make_unique<Client>();
    c->fd = fd;
    c->peer = a.to_string();
    if (!key_.empty()) c->auth = Auth::kHello;
    clients_.push_back(std::move(c));
  }
}

void TcpStoreServerImpl::drop(size_t index, const char* why) {
  Client* c = clients_[index].get();
  if (why) UCCL_WARN("tcp store server: dropping client %s: %s", c->peer.c_str(), why);
  close(c->fd);
  clients_.erase(clients_.begin() + index);
}

bool TcpStoreServerImpl::read_client(Client* c) {
  char buf[65536];
  for (;;) {
    ssize_t n = recv(c->fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      c->in.append(buf, static_cast<size_t>(n));
      if (static_cast<size_t>(n) < sizeof buf) return true;
      continue;
    }
    if (n == 0) {
      c->eof = true;
      return true;
    }
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK;
  }
}

bool TcpStoreServerImpl::flush_client(Client* c) {
  while (c->out_pos < c->out.size()) {
    ssize_t n = send(c->fd, c->out.data() + c->out_pos, c->out.size() - c->out_pos, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c->out_pos += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
  c->out.clear();
  c->out_pos = 0;
  return true;
}

Parse TcpStoreServerImpl::parse(Client* c, Request* req, std::string* why) {
  const std::string& in = c->in;
  if (in.size() >= 4) {
    uint32_t magic;
    std::memcpy(&magic, in.data(), 4);
    if (magic != kRequestMagic) {
      char b[64];
      std::snprintf(b, sizeof b, "bad magic 0x%08x (not a uccl store client?)", magic);
      *why = b;
      return Parse::kGarbage;
    }
  }
  if (in.size() < sizeof(RequestHeader)) return Parse::kIncomplete;
  RequestHeader h;
  std::memcpy(&h, in.data(), sizeof h);
  if (h.op < static_cast<uint8_t>(Op::kSet) || h.op > static_cast<uint8_t>(Op::kCheck)) {
    *why = "unknown operation " + std::to_string(h.op);
    return Parse::kGarbage;
  }
  if (h.nstrings > kMaxStrings) {
    *why = "too many keys (" + std::to_string(h.nstrings) + ")";
    return Parse::kGarbage;
  }
  size_t pos = sizeof h;
  req->strings.clear();
  for (uint32_t i = 0; i < h.nstrings; ++i) {
    if (in.size() < pos + 4) return Parse::kIncomplete;
    uint32_t len;
    std::memcpy(&len, in.data() + pos, 4);
    pos += 4;
    if (pos + len > kMaxRequestBytes) {
      *why = "request larger than " + std::to_string(kMaxRequestBytes) + " bytes";
      return Parse::kGarbage;
    }
    if (in.size() < pos + len) return Parse::kIncomplete;
    req->strings.emplace_back(in.data() + pos, len);
    pos += len;
  }
  req->op = static_cast<Op>(h.op);
  req->arg = h.arg;
  // SET takes key and value, GET and ADD one key, WAIT and CHECK any number of keys.
  size_t need = req->op == Op::kSet ? 2 : (req->op == Op::kGet || req->op == Op::kAdd) ? 1 : 0;
  if (need != 0 && req->strings.size() != need) {
    *why = "operation " + std::to_string(h.op) + " with " + std::to_string(req->strings.size()) + " strings";
    return Parse::kGarbage;
  }
  c->in.erase(0, pos);
  return Parse::kComplete;
}

void TcpStoreServerImpl::deny(Client* c, const std::string& why) {
  UCCL_WARN("tcp store server: refusing client %s: %s", c->peer.c_str(), why.c_str());
  reply(c, ReplyStatus::kDenied, 0, why);
  flush_client(c);  // best effort: a small write into a fresh socket's buffer
}

Parse TcpStoreServerImpl::authenticate(Client* c, std::string* why) {
  std::string& in = c->in;
  uint32_t magic = 0;
  if (in.size() < 4) return Parse::kIncomplete;
  std::memcpy(&magic, in.data(), 4);
  if (key_.empty()) {
    if (magic != kAuthHelloMagic) return Parse::kComplete;  // keyless: plain requests
    deny(c, "this store has no job key, but the client authenticates with one: set the same UCCL_JOB_KEY "
            "(or UCCL_JOB_KEY_FILE) in every process, the store's included");
    *why = "";
    return Parse::kGarbage;
  }
  if (c->auth == Auth::kHello) {
    if (magic == kRequestMagic) {
      deny(c, "this store requires the job key (UCCL_JOB_KEY or UCCL_JOB_KEY_FILE); the client sent a request "
              "without authenticating");
      return Parse::kGarbage;
    }
    if (magic != kAuthHelloMagic) {
      *why = "bad magic (not a uccl store client?)";
      return Parse::kGarbage;
    }
    if (in.size() < sizeof(AuthHello)) return Parse::kIncomplete;
    AuthHello h;
    std::memcpy(&h, in.data(), sizeof h);
    in.erase(0, sizeof h);
    if (h.version != kAuthVersion) {
      deny(c, "store authentication version " + std::to_string(h.version) + ", this store speaks " +
                  std::to_string(kAuthVersion));
      return Parse::kGarbage;
    }
    std::memcpy(c->client_nonce, h.nonce, kNonceBytes);
    AuthChallenge ch;
    random_bytes(ch.nonce, kNonceBytes);
    std::memcpy(c->server_nonce, ch.nonce, kNonceBytes);
    const std::string nonces = std::string(reinterpret_cast<const char*>(c->client_nonce), kNonceBytes) +
                               std::string(reinterpret_cast<const char*>(c->server_nonce), kNonceBytes);
    const std::string mac = hmac_sha256(key_, kStoreServerLabel, nonces);
    std::memcpy(ch.mac, mac.data(), kMacBytes);
    c->out.append(reinterpret_cast<const char*>(&ch), sizeof ch);
    c->auth = Auth::kProof;
    if (in.size() < 4) return Parse::kIncomplete;
    std::memcpy(&magic, in.data(), 4);
  }
  // Auth::kProof
  if (magic != kAuthProofMagic) {
    deny(c, "expected the client's proof of the job key, got something else");
    return Parse::kGarbage;
  }
  if (in.size() < sizeof(AuthProof)) return Parse::kIncomplete;
  AuthProof p;
  std::memcpy(&p, in.data(), sizeof p);
  in.erase(0, sizeof p);
  const std::string nonces = std::string(reinterpret_cast<const char*>(c->client_nonce), kNonceBytes) +
                             std::string(reinterpret_cast<const char*>(c->server_nonce), kNonceBytes);
  const std::string want = hmac_sha256(key_, kStoreClientLabel, nonces);
  if (!equal_ct(want.data(), p.mac, kMacBytes)) {
    deny(c, "wrong job key: the client's UCCL_JOB_KEY differs from the store's");
    return Parse::kGarbage;
  }
  c->auth = Auth::kOpen;
  return Parse::kComplete;
}

bool TcpStoreServerImpl::process_input(Client* c) {
  Request req;
  if (c->auth != Auth::kOpen || key_.empty()) {
    std::string why;
    Parse p = authenticate(c, &why);
    if (p == Parse::kGarbage) {
      if (!why.empty()) UCCL_WARN("tcp store server: closing connection from %s: %s", c->peer.c_str(), why.c_str());
      return false;
    }
    if (p == Parse::kIncomplete) return flush_client(c);
  }
  while (!c->parked) {
    std::string why;
    Parse p = parse(c, &req, &why);
    if (p == Parse::kIncomplete) break;
    if (p == Parse::kGarbage) {
      UCCL_WARN("tcp store server: closing connection from %s: %s", c->peer.c_str(), why.c_str());
      return false;
    }
    execute(c, req);
  }
  return flush_client(c);
}

const std::string* TcpStoreServerImpl::missing_key(const std::vector<std::string>& keys) const {
  for (auto& k : keys)
    if (!data_.count(k)) return &k;
  return nullptr;
}

void TcpStoreServerImpl::reply(Client* c, ReplyStatus st, int64_t value, const std::string& payload) {
  ReplyHeader h;
  h.status = static_cast<uint8_t>(st);
  h.value = value;
  h.payload_bytes = payload.size();
  c->out.append(reinterpret_cast<const char*>(&h), sizeof h);
  c->out.append(payload);
}

void TcpStoreServerImpl::execute(Client* c, Request& req) {
  switch (req.op) {
    case Op::kSet:
      data_[req.strings[0]] = std::move(req.strings[1]);
      reply(c, ReplyStatus::kOk, 0, "");
      acknowledge_then_wake(c);
      return;
    case Op::kAdd: {
      std::string& v = data_[req.strings[0]];
      char* end = nullptr;
      long long cur = v.empty() ? 0 : std::strtoll(v.c_str(), &end, 10);
      if (!v.empty() && (end == v.c_str() || end != v.c_str() + v.size())) {
        reply(c, ReplyStatus::kError, 0, "key '" + req.strings[0] + "' does not hold an integer");
        return;
      }
      long long next = static_cast<long long>(static_cast<uint64_t>(cur) + static_cast<uint64_t>(req.arg));
      v = std::to_string(next);
      reply(c, ReplyStatus::kOk, next, "");
      acknowledge_then_wake(c);
      return;
    }
    case Op::kCheck:
      reply(c, ReplyStatus::kOk, missing_key(req.strings) ? 0 : 1, "");
      return;
    case Op::kGet:
    case Op::kWait: {
      const std::string* missing = missing_key(req.strings);
      if (!missing) {
        reply(c, ReplyStatus::kOk, 0, req.op == Op::kGet ? data_[req.strings[0]] : std::string());
      } else if (req.arg <= 0) {
        reply(c, ReplyStatus::kTimeout, 0, *missing);
      } else {
        c->parked = true;
        c->parked_op = req.op;
        c->parked_keys = std::move(req.strings);
        c->parked_deadline = now_s() + static_cast<double>(req.arg) / 1000.0;
      }
      return;
    }
  }
}

// The writer's reply goes into its socket before any waiter hears of the key. A waiter may be
// the process serving the store, and one that leaves the moment its wait returns (rank 0 waiting
// for "done" from the others, then exiting) would otherwise take the server with it while the
// writer's reply is still in c->out: the writer's set then failed with "closed the connection"
// (tests/test_tcp_store.py). Data written to the socket is delivered even if this process exits.
// The reverse, this process setting a key and leaving at once, stays unsafe whatever the order:
// a waiter between two wait slices has a request nobody will read. The server must outlive the
// waiters of the keys its own process sets (as with torch's TCPStore).
void TcpStoreServerImpl::acknowledge_then_wake(Client* c) {
  flush_client(c);  // a write error shows up in process_input's own flush
  wake_parked(now_s());
}

void TcpStoreServerImpl::wake_parked(double now) {
  for (auto& cp : clients_) {
    Client* c = cp.get();
    if (!c->parked) continue;
    const std::string* missing = missing_key(c->parked_keys);
    if (missing && now < c->parked_deadline) continue;
    if (missing) reply(c, ReplyStatus::kTimeout, 0, *missing);
    else reply(c, ReplyStatus::kOk, 0, c->parked_op == Op::kGet ? data_[c->parked_keys[0]] : std::string());
    c->parked = false;
    c->parked_keys.clear();
    // Serve requests that arrived behind the parked one; a write error shows up as POLLERR later.
    if (!process_input(c)) shutdown(c->fd, SHUT_RDWR);
  }
}

}  // namespace

bool tcp_store_port_served_here(int port) {
  std::lock_guard<std::mutex> lock(g_served_mu);
  return g_served_ports.count(port) > 0;
}

Result<std::unique_ptr<TcpStoreServer>> TcpStoreServer::start(const std::string& host, int port) {
  Result<std::string> key = job_key();
  if (!key.ok()) return key.status().with_context("tcp store server");
  return start(host, port, key.value());
}

Result<std::unique_ptr<TcpStoreServer>> TcpStoreServer::start(const std::string& host, int port,
                                                              const std::string& job_key) {
  Result<SockAddr> addr = parse_address(host, port);
  if (!addr.ok()) return addr.status().with_context("tcp store server");
  Result<int> fd = listen_on(&addr.value(), 1024);
  if (!fd.ok()) return fd.status().with_context("tcp store server");
  Status nb = set_nonblocking(fd.value(), true);
  int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (!nb.ok() || wake < 0) {
    int err = errno;
    close(fd.value());
    if (wake >= 0) close(wake);
    return nb.ok() ? SystemError("tcp store server: eventfd", err) : nb;
  }
  UCCL_INFO("tcp store server listening on %s%s", addr.value().to_string().c_str(),
            job_key.empty() ? "" : " (clients must prove the job key)");
  return std::unique_ptr<TcpStoreServer>(new TcpStoreServerImpl(fd.value(), wake, addr.value().port(), job_key));
}

}  // namespace uccl
