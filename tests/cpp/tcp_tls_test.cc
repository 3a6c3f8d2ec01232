// Encrypted tcp links (transports/tcp/tcp_tls.h) over real loopback sockets, with a proxy in
// the middle that forwards every byte and keeps a copy of what went on the wire: the data
// arrives exactly, and the wire never shows the plaintext (the same run without TLS does, so
// the check can fail). Also: the offer/answer negotiation by topology level
// (UCCL_ENCRYPT=inter_cluster), a link whose PSK differs (the handshake fails, typed), a
// mixed endpoint pair of many messages in flight and a fused reduction over TLS.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "endpoint_test_util.h"
#include "test_util.h"
#include "base/net.h"
#include "bootstrap/auth.h"
#include "transports/tcp/tcp_endpoint.h"
#include "transports/tcp/tcp_tls.h"
#include "transports/tcp/tcp_transport.h"

using namespace uccl;

namespace {

const std::string kMarker = "PLAINTEXT-MARKER-0123456789-";

// Forwards between `a` and `b` (both directions) until both sides closed; keeps a copy of
// everything on the wire.
class Proxy {
 public:
  Proxy(int a, int b) : a_(a), b_(b), thread_([this] { run(); }) {}
  ~Proxy() {
    stop_ = true;
    thread_.join();
    close(a_);
    close(b_);
  }
  std::string wire() {
    std::lock_guard<std::mutex> lock(mu_);
    return wire_;
  }

 private:
  void run() {
    char buf[1 << 16];
    bool a_open = true, b_open = true;
    while (!stop_ && (a_open || b_open)) {
      pollfd p[2] = {{a_, POLLIN, 0}, {b_, POLLIN, 0}};
      if (poll(p, 2, 20) <= 0) continue;
      for (int i = 0; i < 2; ++i) {
        if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        int from = i == 0 ? a_ : b_, to = i == 0 ? b_ : a_;
        ssize_t n = recv(from, buf, sizeof buf, MSG_DONTWAIT);
        if (n <= 0) {
          if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            shutdown(to, SHUT_WR);
            (i == 0 ? a_open : b_open) = false;
          }
          continue;
        }
        {
          std::lock_guard<std::mutex> lock(mu_);
          wire_.append(buf, static_cast<size_t>(n));
        }
        send_all(to, buf, static_cast<size_t>(n), now_s() + 10);
      }
    }
  }
  int a_, b_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::string wire_;
  std::thread thread_;
};

void socket_pair(int* a, int* b) {
  SockAddr addr = parse_address("127.0.0.1", 0).value();
  auto lfd = listen_on(&addr);
  REQUIRE_OK(lfd.status());
  auto c = connect_to(addr, now_s() + 5);
  REQUIRE_OK(c.status());
  *a = c.value();
  *b = accept(lfd.value(), nullptr, nullptr);
  REQUIRE(*b >= 0);
  close(lfd.value());
}

PeerContext ctx(int me, int peer, const std::string& key = std::string(32, 'k'), int level = 2) {
  PeerContext p;
  p.my_rank = me;
  p.peer_rank = peer;
  p.peer_host = "localhost";
  p.timeout_s = 5;
  p.level = level;
  p.link_key = key;
  return p;
}

struct Link {
  std::vector<std::unique_ptr<Proxy>> proxies;
  std::unique_ptr<Endpoint> a, b;
  std::string wire() {
    std::string w;
    for (auto& p : proxies) w += p->wire();
    return w;
  }
};

// nsocks sockets per side, each through its own proxy; endpoints made directly (tls or not).
Link make_link(int nsocks, bool tls, const std::string& key_a = std::string(32, 'k'),
               const std::string& key_b = std::string(32, 'k')) {
  Link l;
  std::vector<int> fa, fb;
  for (int i = 0; i < nsocks; ++i) {
    int a, pa, pb, b;
    socket_pair(&a, &pa);
    socket_pair(&pb, &b);
    l.proxies.push_back(std::make_unique<Proxy>(pa, pb));
    fa.push_back(a);
    fb.push_back(b);
  }
  auto ea = tcp::TcpEndpoint::create(ctx(0, 1, key_a), fa, tls, false);
  auto eb = tcp::TcpEndpoint::create(ctx(1, 0, key_b), fb, tls, true);
  REQUIRE_OK(ea.status());
  REQUIRE_OK(eb.status());
  l.a.reset(ea.value());
  l.b.reset(eb.value());
  return l;
}

using uccl_test::drive;
using uccl_test::env;

std::vector<uint8_t> marked(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(kMarker[i % kMarker.size()]);
  return v;
}

// Sends `sizes` both ways at once and checks every byte.
void exchange(Link& l, const std::vector<size_t>& sizes) {
  uint64_t seq = 0;
  for (size_t sz : sizes) {
    auto src = marked(sz), src2 = marked(sz);
    std::vector<uint8_t> dst(sz, 0), dst2(sz, 0);
    SendRequest s1, s2;
    RecvRequest r1, r2;
    s1.data = src.data(), s1.bytes = sz, s1.env = env(seq, sz);
    r1.dst = dst.data(), r1.bytes = sz, r1.expect = env(seq, sz);
    s2.data = src2.data(), s2.bytes = sz, s2.env = env(seq, sz);
    r2.dst = dst2.data(), r2.bytes = sz, r2.expect = env(seq, sz);
    ++seq;
    l.b->post_recv(&r1);
    l.a->post_send(&s1);
    l.b->post_send(&s2);
    l.a->post_recv(&r2);
    REQUIRE(drive(l, [&] { return !s1.pending() && !r1.pending() && !s2.pending() && !r2.pending(); }));
    CHECK((s1.state == ReqState::kDone && r1.state == ReqState::kDone && s2.state == ReqState::kDone &&
           r2.state == ReqState::kDone));
    CHECK(dst == src);
    CHECK(dst2 == src2);
  }
}

}  // namespace

TEST_CASE("tls: data arrives exactly and the wire never shows the plaintext") {
  for (int nsocks : {1, 2}) {
    Link l = make_link(nsocks, true);
    exchange(l, {1, 100, 4099, 1 << 20, (8 << 20) + 3});
    CHECK(l.a->describe().find("TLSv1.3") != std::string::npos);
    CHECK(l.b->describe().find("TLS_AES_128_GCM_SHA256") != std::string::npos);
    const std::string w = l.wire();
    CHECK(w.size() > 2 * ((8u << 20) + (1u << 20)));  // everything went through the proxy
    CHECK(w.find(kMarker) == std::string::npos);
    CHECK(w.find(kMarker.substr(0, 16)) == std::string::npos);
  }
}

TEST_CASE("tls: the same exchange without TLS shows the plaintext on the wire (the check can fail)") {
  Link l = make_link(2, false);
  exchange(l, {100, 1 << 20});
  CHECK(l.a->describe().find("TLS") == std::string::npos);
  CHECK(l.wire().find(kMarker) != std::string::npos);
}

TEST_CASE("tls: many messages in flight and a fused reduction over TLS") {
  Link l = make_link(2, true);
  const int kN = 200;
  std::vector<std::vector<float>> src(kN), dst(kN);
  std::vector<SendRequest> sends(kN);
  std::vector<RecvRequest> recvs(kN);
  for (int i = 0; i < kN; ++i) {
    const size_t n = i % 7 == 0 ? 300000 : static_cast<size_t>(i * 13 + 1);
    src[i].assign(n, static_cast<float>(i));
    dst[i].assign(n, 1.0f);
    Envelope e = env(i, n);
    sends[i].data = src[i].data(), sends[i].bytes = n * 4, sends[i].env = e;
    recvs[i].dst = dst[i].data(), recvs[i].bytes = n * 4, recvs[i].expect = e;
    recvs[i].reduce = true, recvs[i].dtype = DataType::kFloat32, recvs[i].op = RedOp::kSum;
  }
  for (int i = 0; i < kN; ++i) l.a->post_send(&sends[i]);
  for (int i = 0; i < kN; ++i) l.b->post_recv(&recvs[i]);
  REQUIRE(drive(l, [&] { return !l.a->has_pending() && !l.b->has_pending(); }));
  int wrong = 0;
  for (int i = 0; i < kN; ++i) {
    CHECK(recvs[i].state == ReqState::kDone);
    for (float v : dst[i]) wrong += v != static_cast<float>(i) + 1.0f;
  }
  CHECK(wrong == 0);
}

TEST_CASE("tls: a link whose key differs fails its handshake on both sides, typed and named") {
  Link l = make_link(1, true, std::string(32, 'k'), std::string(32, 'x'));
  std::vector<uint8_t> src(1000, 1), dst(1000, 0);
  SendRequest s;
  RecvRequest r;
  s.data = src.data(), s.bytes = 1000, s.env = env(0, 1000);
  r.dst = dst.data(), r.bytes = 1000, r.expect = env(0, 1000);
  l.a->post_send(&s);
  l.b->post_recv(&r);
  REQUIRE(drive(l, [&] { return !s.pending() && !r.pending(); }, 10));
  CHECK((s.state == ReqState::kFailed && r.state == ReqState::kFailed));
  CHECK(s.error.code() == Code::kRemoteError);
  CHECK(s.error.message().find("TLS handshake failed") != std::string::npos);
  CHECK(r.error.message().find("rank 0") != std::string::npos);
  CHECK(dst == std::vector<uint8_t>(1000, 0));
}

TEST_CASE("tls: UCCL_ENCRYPT=inter_cluster encrypts only pairs of different clusters; either side can ask") {
  setenv("UCCL_ENCRYPT", "inter_cluster", 1);  // read once, at first use: this is the first
  CHECK(!encrypt_level(0));
  CHECK(!encrypt_level(1));
  CHECK(encrypt_level(2));
  CHECK(encrypt_level(-1));  // unknown level: the safe side
  auto t = make_tcp_transport(1);
  for (int level : {1, 2}) {
    int a, b;
    socket_pair(&a, &b);
    auto pc = t->start_connect(ctx(0, 1, std::string(32, 'k'), level));
    REQUIRE_OK(pc.status());
    std::unique_ptr<PendingConnect> c(pc.value());
    CHECK(c->offer() == (level == 2 ? "tcp1+tls" : "tcp1"));
    std::string answer;
    auto eb = t->accept(ctx(1, 0, std::string(32, 'k'), level), c->offer(), &answer, {b});
    REQUIRE_OK(eb.status());
    CHECK(answer == c->offer());
    auto ea = c->finish(answer, {a});
    REQUIRE_OK(ea.status());
    Link l;
    l.a.reset(ea.value());
    l.b.reset(eb.value());
    exchange(l, {5000});
    CHECK((l.a->describe().find("TLS") != std::string::npos) == (level == 2));
  }
  // The accepting side wants TLS for a pair the connecting side would not encrypt: TLS.
  int a, b;
  socket_pair(&a, &b);
  std::string answer;
  auto eb = t->accept(ctx(1, 0, std::string(32, 'k'), 2), "tcp1", &answer, {b});
  REQUIRE_OK(eb.status());
  CHECK(answer == "tcp1+tls");
  std::unique_ptr<Endpoint> b_ep(eb.value());
  close(a);
  // An unknown protocol is a normal "not supported".
  auto bad = t->accept(ctx(1, 0), "tcp9", &answer, {});
  CHECK(bad.status().code() == Code::kNotSupported);
}

TEST_CASE("tls: the kernel probe answers and says why not") {
  std::string why;
  const bool k = kernel_tls_available(&why);
  CHECK((k || !why.empty()));
  CHECK(tls_mode().find(k ? "kernel TLS available" : "user-space TLS") != std::string::npos);
}
