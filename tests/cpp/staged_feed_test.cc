// Posting ahead through the staged endpoint (transport.h: SendRequest::fed_by and consumed,
// RecvRequest::guard and delivered, Endpoint::feeds): a send fed by a receive reads only bytes
// the receive has delivered, and a receive guarded by a send writes only bytes the send has
// read, whatever the peer does meanwhile. Two staged endpoints in split mode over a loopback tcp
// pair, buffers of the simulated device, one thread driving both. Each test holds the peer back
// so that an endpoint that ignored the link would read (or write) too early, and the bytes that
// arrive say so.
#include <cstring>
#include <memory>
#include <vector>

#include "base/sim_device.h"
#include "endpoint_test_util.h"
#include "test_util.h"
#include "transports/staged/staged_endpoint.h"

using namespace uccl;
using uccl_test::drive;
using uccl_test::env;

namespace {

constexpr size_t kChunk = 64 << 10;

struct StagedPair {
  std::unique_ptr<Endpoint> a, b;
};

StagedPair staged_pair() {
  uccl_test::TcpPair t = uccl_test::tcp_pair();
  StagedPair p;
  // Two slots per direction: a held-back peer stalls a sender after a few chunks.
  p.a.reset(new StagedEndpoint(std::move(t.a), kChunk, 4 * kChunk, false, 1));
  p.b.reset(new StagedEndpoint(std::move(t.b), kChunk, 4 * kChunk, false, 0));
  CHECK(p.a->feeds());
  return p;
}

// Device memory of the simulated device, filled from / read back to the host.
struct DevBuf {
  SimBackend* b = sim_backend();
  std::unique_ptr<DeviceStream> st = b->create_stream(0).take();
  char* p = nullptr;
  size_t n = 0;
  explicit DevBuf(size_t bytes) : n(bytes) { p = static_cast<char*>(b->alloc(0, bytes).take()); }
  ~DevBuf() { b->free(p); }
  void fill(const std::vector<char>& v, size_t off = 0) {
    REQUIRE_OK(b->copy_async(p + off, v.data(), v.size(), CopyDir::kHostToDevice, st.get()));
    REQUIRE_OK(b->synchronize(st.get()));
  }
  std::vector<char> read(size_t off, size_t bytes) {
    std::vector<char> v(bytes);
    REQUIRE_OK(b->copy_async(v.data(), p + off, bytes, CopyDir::kDeviceToHost, st.get()));
    REQUIRE_OK(b->synchronize(st.get()));
    return v;
  }
};

std::vector<char> pattern(size_t bytes, int seed) {
  std::vector<char> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<char>((i * 131 + seed * 17 + i / 4096) & 0xff);
  return v;
}

// A ring step posted ahead, as rank 0: a receive into x (message 1), and a send of x (message
// 2) fed by it.
void post_forward(Endpoint* e, char* x, size_t n, RecvRequest* r, SendRequest* s) {
  r->dst = x;
  r->bytes = n;
  r->expect = env(1, n);
  s->data = x;
  s->bytes = n;
  s->env = env(2, n);
  s->fed_by = r;
  e->post_recv(r);
  e->post_send(s);
}

}  // namespace

TEST_CASE("a send fed by a receive reads each chunk only once the receive delivered it") {
  StagedPair p = staged_pair();
  const size_t n = 16 * kChunk + 1000;  // a short last chunk
  DevBuf x(n), y(n);
  x.fill(std::vector<char>(n, 0));  // what a send that did not wait would read
  const std::vector<char> d = pattern(n, 1);
  DevBuf src(n);
  src.fill(d);

  RecvRequest r;
  SendRequest s;
  post_forward(p.a.get(), x.p, n, &r, &s);
  // Rank 1 has sent nothing yet: the send must not move.
  const double until = now_s() + 0.05;
  while (now_s() < until) p.a->progress();
  CHECK(s.pending());
  CHECK(s.consumed == 0);

  SendRequest s1;
  s1.data = src.p;
  s1.bytes = n;
  s1.env = env(1, n);
  RecvRequest r1;
  r1.dst = y.p;
  r1.bytes = n;
  r1.expect = env(2, n);
  p.b->post_send(&s1);
  p.b->post_recv(&r1);
  bool ahead = false;  // the send never read past what the receive had delivered
  REQUIRE(drive(p, [&] {
    ahead = ahead || (r.pending() && s.consumed > r.delivered);
    return !r.pending() && !s.pending() && !s1.pending() && !r1.pending();
  }));
  CHECK(!ahead);
  CHECK(r.state == ReqState::kDone);
  CHECK(s.state == ReqState::kDone);
  CHECK(s.consumed == n);
  CHECK(r.delivered == n);
  CHECK(y.read(0, n) == d);  // rank 1 got back what it sent, not the zeros x held before
}

TEST_CASE("a receive guarded by a send lands each chunk only once the send read those bytes") {
  StagedPair p = staged_pair();
  // Larger than what loopback's socket buffers hold, so rank 0's send stalls while rank 1
  // does not receive, with most of x unread.
  const size_t n = 512 * kChunk, half = n / 2;
  DevBuf x(n), z(n), src(half);
  const std::vector<char> orig = pattern(n, 2), e = pattern(half, 3);
  x.fill(orig);
  src.fill(e);

  // Rank 0 sends x and receives into its second half (in place, posted ahead).
  SendRequest s;
  s.data = x.p;
  s.bytes = n;
  s.env = env(1, n);
  RecvRequest g;
  g.dst = x.p + half;
  g.bytes = half;
  g.expect = env(2, half);
  g.guard = &s;
  p.a->post_send(&s);
  p.a->post_recv(&g);
  // Rank 1 sends the bytes for the second half at once and receives nothing for a while.
  SendRequest s1;
  s1.data = src.p;
  s1.bytes = half;
  s1.env = env(2, half);
  p.b->post_send(&s1);
  bool early = false;  // a chunk of x written before the send read it
  auto watch = [&] {
    if (g.delivered > 0 && s.pending() && s.consumed < half + g.delivered) early = true;
  };
  const double until = now_s() + 0.2;
  while (now_s() < until) {
    p.a->progress();
    p.b->progress();
    watch();
  }
  CHECK(s.pending());  // held back by rank 1 ...
  CHECK(s.consumed < half);  // ... before it reached the second half
  CHECK(g.delivered == 0);

  RecvRequest r1;
  r1.dst = z.p;
  r1.bytes = n;
  r1.expect = env(1, n);
  p.b->post_recv(&r1);
  REQUIRE(drive(p, [&] {
    watch();
    return !s.pending() && !g.pending() && !s1.pending() && !r1.pending();
  }));
  CHECK(!early);
  CHECK(g.state == ReqState::kDone);
  CHECK(z.read(0, n) == orig);  // the send read x before any of rank 1's bytes landed there
  CHECK(x.read(half, half) == e);
  CHECK(x.read(0, half) == std::vector<char>(orig.begin(), orig.begin() + half));
}

TEST_CASE("a send fed by a receive that failed reads nothing and fails with the endpoint") {
  StagedPair p = staged_pair();
  const size_t n = 4 * kChunk;
  DevBuf x(n), src(n);
  src.fill(pattern(n, 4));
  RecvRequest r;
  SendRequest s;
  post_forward(p.a.get(), x.p, n, &r, &s);
  // Rank 1 sends a message of another operation: the receive fails on the envelope.
  SendRequest s1;
  s1.data = src.p;
  s1.bytes = n;
  s1.env = env(9, n);
  p.b->post_send(&s1);
  REQUIRE(drive(p, [&] { return !r.pending(); }));
  CHECK(r.state == ReqState::kFailed);
  for (int i = 0; i < 1000; ++i) p.a->progress();
  CHECK(s.state != ReqState::kDone);  // pending, or failed with the endpoint
  CHECK(s.consumed == 0);
  p.a->fail_all(r.error);
  CHECK(s.state == ReqState::kFailed);
}
