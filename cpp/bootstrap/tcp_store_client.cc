// The TCP store client: one connection, one request in flight at a time (a mutex serializes
// callers, so one client may be shared by several threads).
//
// Timeouts: GET/WAIT carry their timeout to the server, which answers "timeout" itself; that
// keeps the request/reply stream in step. Long ones go in slices of 50 ms (sliced(), below), so
// that one thread's long wait never holds the shared client. The client additionally bounds its
// own wait by the same timeout plus a grace period, so a server that hangs (or a host that
// vanished without a FIN) still ends in an error rather than a hang; and a request or reply that
// the server's host stops acknowledging (a dead link) fails within UCCL_TCP_DEAD_LINK_S
// (LinkWatch). After any I/O error the stream may be out of step, so the client closes the
// connection and every later call fails with the first error.
//
// With a job key the client authenticates before its first request (tcp_store_wire.h) and
// checks the server's proof too: a "store" that does not know the key gets nothing from us.
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <condition_variable>
#include <mutex>

#include "uccl/tcp_store.h"
#include "bootstrap/auth.h"
#include "bootstrap/tcp_store_wire.h"
#include "base/config.h"
#include "base/log.h"
#include "base/net.h"

namespace uccl {
namespace {

using namespace store_wire;

constexpr double kGraceS = 5.0;  // how much longer than the server the client waits for a reply

struct Reply {
  ReplyStatus status = ReplyStatus::kOk;
  int64_t value = 0;
  std::string payload;
};

bool same_ip(const SockAddr& a, const SockAddr& b) {
  if (a.family() != b.family()) return false;
  if (a.family() == AF_INET)
    return std::memcmp(&reinterpret_cast<const sockaddr_in*>(&a.ss)->sin_addr,
                       &reinterpret_cast<const sockaddr_in*>(&b.ss)->sin_addr, sizeof(in_addr)) == 0;
  if (a.family() == AF_INET6)
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(&a.ss)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(&b.ss)->sin6_addr, sizeof(in6_addr)) == 0;
  return false;
}

class TcpStoreClient : public Store {
 public:
  TcpStoreClient(int fd, std::string server, int port) : fd_(fd), server_(std::move(server)), port_(port) {}
  ~TcpStoreClient() override {
    if (fd_ >= 0) close(fd_);
  }

  Status set(const std::string& key, const std::string& value) override {
    Result<Reply> r = call(Op::kSet, 0, {&key, &value}, io_deadline());
    return r.ok() ? check_error(r.value(), "set '" + key + "'") : r.status();
  }

  Result<std::string> get(const std::string& key, double timeout_s) override {
    Result<Reply> r = sliced(Op::kGet, {&key}, timeout_s);
    if (!r.ok()) return r.status();
    if (r.value().status == ReplyStatus::kTimeout)
      return Status(Code::kTimeout, "tcp store " + server_ + ": key '" + key + "' did not appear within " +
                                        seconds_text(timeout_s));
    Status s = check_error(r.value(), "get '" + key + "'");
    if (!s.ok()) return s;
    return std::move(r.value().payload);
  }

  Status wait(const std::vector<std::string>& keys, double timeout_s) override {
    std::vector<const std::string*> ptrs;
    for (auto& k : keys) ptrs.push_back(&k);
    Result<Reply> r = sliced(Op::kWait, ptrs, timeout_s);
    if (!r.ok()) return r.status();
    if (r.value().status == ReplyStatus::kTimeout)
      return Status(Code::kTimeout, "tcp store " + server_ + ": key '" + r.value().payload + "' (of " +
                                        std::to_string(keys.size()) + " waited for) did not appear within " +
                                        seconds_text(timeout_s));
    return check_error(r.value(), "wait");
  }

  Result<int64_t> add(const std::string& key, int64_t delta) override {
    Result<Reply> r = call(Op::kAdd, delta, {&key}, io_deadline());
    if (!r.ok()) return r.status();
    Status s = check_error(r.value(), "add '" + key + "'");
    if (!s.ok()) return s;
    return r.value().value;
  }

 private:
  // A blocking GET/WAIT goes to the server in slices of at most kSliceS, the mutex released
  // between them: the server still answers the moment the key is set, but no caller holds the
  // shared client for its whole timeout (another thread's call waits at most one slice). The
  // last reply (the value, or the timeout naming the missing key) is returned.
  static constexpr double kSliceS = 0.05;
  Result<Reply> sliced(Op op, const std::vector<const std::string*>& strings, double timeout_s) {
    const double end = now_s() + std::max(timeout_s, 0.0);
    for (;;) {
      const double left = std::max(end - now_s(), 0.0);
      const double slice = std::min(left, kSliceS);
      Result<Reply> r = call(op, to_ms(slice), strings, now_s() + slice + kGraceS);
      if (!r.ok() || r.value().status != ReplyStatus::kTimeout || left <= kSliceS) return r;
    }
  }
  static int64_t to_ms(double s) { return s <= 0 ? 0 : s > 9e15 ? static_cast<int64_t>(9e15) : static_cast<int64_t>(s * 1000); }
  static double io_deadline() { return now_s() + kTimeoutS.get(); }

  Status check_error(const Reply& r, const std::string& what) const {
    if (r.status == ReplyStatus::kOk) return Status::Ok();
    if (r.status == ReplyStatus::kDenied)
      return Status(Code::kUnauthenticated, "tcp store " + server_ + " refused this client: " + r.payload);
    return Status(Code::kRemoteError, "tcp store " + server_ + ": " + what + " failed: " + r.payload);
  }

  Result<Reply> call(Op op, int64_t arg, const std::vector<const std::string*>& strings, double deadline) {
    Turn turn(this);
    if (!broken_.ok()) return broken_;
    RequestHeader h;
    h.op = static_cast<uint8_t>(op);
    h.arg = arg;
    h.nstrings = static_cast<uint32_t>(strings.size());
    std::string msg(reinterpret_cast<const char*>(&h), sizeof h);
    for (const std::string* s : strings) {
      if (s->size() > kMaxRequestBytes / 2) return InvalidArgument("tcp store: value too large (" + std::to_string(s->size()) + " bytes)");
      uint32_t len = static_cast<uint32_t>(s->size());
      msg.append(reinterpret_cast<const char*>(&len), 4);
      msg.append(*s);
    }
    Status st = send_all(fd_, msg.data(), msg.size(), deadline, &watch_);
    Reply r;
    ReplyHeader rh;
    if (st.ok()) st = recv_all(fd_, &rh, sizeof rh, deadline, &watch_);
    if (st.ok() && rh.magic != kReplyMagic)
      st = Status(Code::kRemoteError, "bad reply magic (is " + server_ + " a uccl store?)");
    if (st.ok() && rh.payload_bytes > kMaxRequestBytes) st = Status(Code::kRemoteError, "reply too large");
    if (st.ok()) {
      r.status = static_cast<ReplyStatus>(rh.status);
      r.value = rh.value;
      r.payload.resize(rh.payload_bytes);
      st = recv_all(fd_, &r.payload[0], r.payload.size(), deadline, &watch_);
    }
    if (st.ok() && r.status == ReplyStatus::kDenied) {  // the server closes after a denial
      broken_ = check_error(r, "");
      close(fd_);
      fd_ = -1;
      return broken_;
    }
    if (!st.ok()) {
      // The stream is out of step now: close it so that nothing later reads a stale reply.
      Code code = st.code() == Code::kTimeout ? Code::kTimeout : Code::kRemoteError;
      broken_ = Status(code, "tcp store " + server_ + ": " + st.message());
      close(fd_);
      fd_ = -1;
      return broken_;
    }
    return r;
  }

  // Served here if a server of this process has the port and the connection goes to this
  // machine (the same address at both ends: loopback, or one of this host's addresses).
  bool served_here() const override {
    if (!tcp_store_port_served_here(port_)) return false;
    SockAddr me, peer;
    me.len = peer.len = sizeof me.ss;
    if (getsockname(fd_, reinterpret_cast<sockaddr*>(&me.ss), &me.len) != 0 ||
        getpeername(fd_, reinterpret_cast<sockaddr*>(&peer.ss), &peer.len) != 0)
      return false;
    return same_ip(me, peer);
  }

  // Requests take turns in arrival order (a ticket lock): with a plain mutex the thread going
  // round sliced()'s loop re-took it at once and the other thread still waited the whole timeout.
  struct Turn {
    explicit Turn(TcpStoreClient* c) : c_(c) {
      std::unique_lock<std::mutex> l(c_->mu_);
      const uint64_t mine = c_->next_ticket_++;
      c_->turn_cv_.wait(l, [&] { return c_->serving_ == mine; });
    }
    ~Turn() {
      {
        std::lock_guard<std::mutex> l(c_->mu_);
        ++c_->serving_;
      }
      c_->turn_cv_.notify_all();
    }
    TcpStoreClient* c_;
  };
  std::mutex mu_;
  std::condition_variable turn_cv_;
  uint64_t next_ticket_ = 0, serving_ = 0;  // guarded by mu_
  int fd_;
  LinkWatch watch_;  // dead links (call() holds the turn while it uses it)
  std::string server_;
  int port_;
  Status broken_;
};

// The client's half of the challenge-response (tcp_store_wire.h); the server's verdict on our
// proof arrives as the reply to the first request (kDenied if wrong).
Status authenticate(int fd, const std::string& server, const std::string& key, double deadline) {
  AuthHello hello;
  random_bytes(hello.nonce, kNonceBytes);
  UCCL_RETURN_IF_ERROR(send_all(fd, &hello, sizeof hello, deadline));
  uint32_t magic = 0;
  Status st = recv_all(fd, &magic, 4, deadline);
  if (!st.ok()) {
    if (st.code() == Code::kTimeout) return st;
    return Status(Code::kUnauthenticated, "tcp store " + server + " closed the connection during authentication (" +
                                              st.message() + "); is it a uccl store with the same job key?");
  }
  if (magic == kReplyMagic) {  // a refusal (a keyless store, another version)
    ReplyHeader rh;
    rh.magic = magic;
    st = recv_all(fd, reinterpret_cast<char*>(&rh) + 4, sizeof rh - 4, deadline);
    std::string why = "no reason given";
    if (st.ok() && rh.payload_bytes <= 4096) {
      why.assign(rh.payload_bytes, '\0');
      if (!recv_all(fd, &why[0], why.size(), deadline).ok()) why = "no reason given";
    }
    return Status(Code::kUnauthenticated, "tcp store " + server + " refused this client: " + why);
  }
  if (magic != kAuthChallengeMagic)
    return Status(Code::kUnauthenticated, "tcp store " + server + " answered the authentication with garbage");
  AuthChallenge ch;
  st = recv_all(fd, reinterpret_cast<char*>(&ch) + 4, sizeof ch - 4, deadline);
  if (!st.ok()) return st.with_context("tcp store " + server + ": authentication");
  const std::string nonces = std::string(reinterpret_cast<const char*>(hello.nonce), kNonceBytes) +
                             std::string(reinterpret_cast<const char*>(ch.nonce), kNonceBytes);
  const std::string want = hmac_sha256(key, kStoreServerLabel, nonces);
  if (!equal_ct(want.data(), ch.mac, kMacBytes))
    return Status(Code::kUnauthenticated, "tcp store " + server +
                                              " does not know this job's key (wrong job key: its UCCL_JOB_KEY differs "
                                              "from ours); nothing was sent to it");
  AuthProof proof;
  const std::string mac = hmac_sha256(key, kStoreClientLabel, nonces);
  std::memcpy(proof.mac, mac.data(), kMacBytes);
  return send_all(fd, &proof, sizeof proof, deadline);
}

}  // namespace

Result<std::shared_ptr<Store>> connect_tcp_store(const std::string& host, int port, double timeout_s) {
  Result<std::string> key = job_key();
  if (!key.ok()) return key.status().with_context("tcp store");
  return connect_tcp_store(host, port, timeout_s, key.value());
}

Result<std::shared_ptr<Store>> connect_tcp_store(const std::string& host, int port, double timeout_s,
                                                 const std::string& key) {
  Result<SockAddr> addr = parse_address(host, port);
  if (!addr.ok()) return addr.status().with_context("tcp store");
  const double deadline = now_s() + timeout_s;
  Result<int> fd = connect_to(addr.value(), deadline);
  if (!fd.ok()) return fd.status().with_context("tcp store");
  if (!key.empty()) {
    // The server answers at once; a bounded wait also when the caller's timeout is huge.
    Status st = authenticate(fd.value(), addr.value().to_string(), key,
                             std::min(deadline, now_s() + std::max(kTimeoutS.get(), 1.0)));
    if (!st.ok()) {
      close(fd.value());
      return st;
    }
  }
  return std::shared_ptr<Store>(new TcpStoreClient(fd.value(), addr.value().to_string(), port));
}

}  // namespace uccl
