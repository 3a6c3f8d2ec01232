// Hostile bytes on an established tcp data connection: the endpoint has receives posted
// (plain and reducing) and the peer sends arbitrary bytes, then closes. Every receive must end
// (done or failed with a Status) without a crash, an out-of-bounds write or a hang.
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <vector>

#include "base/net.h"
#include "transports/tcp/tcp_transport.h"

using namespace uccl;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  // The first two bytes choose the receives' sizes; the rest is what the "peer" sends.
  const size_t sizes[2] = {size_t(data[0]) * 7, size_t(data[1]) * 64};
  data += 2;
  size -= 2;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 0;
  auto t = make_tcp_transport(1);
  PeerContext ctx;
  ctx.my_rank = 1;
  ctx.peer_rank = 0;
  ctx.timeout_s = 5;
  std::string answer;
  auto ep = t->accept(ctx, "tcp1", &answer, {sv[0]});
  if (!ep.ok()) {
    ::close(sv[1]);
    return 0;
  }
  std::unique_ptr<Endpoint> e(ep.value());
  std::vector<float> a(sizes[0] / 4 + 1), b(sizes[1] / 4 + 1);
  RecvRequest r1, r2;
  r1.dst = a.data();
  r1.bytes = sizes[0] / 4 * 4;
  r2.dst = b.data();
  r2.bytes = sizes[1] / 4 * 4;
  r2.reduce = true;
  r2.dtype = DataType::kFloat32;
  e->post_recv(&r1);
  e->post_recv(&r2);
  send_all(sv[1], data, size, now_s() + 5);
  ::close(sv[1]);
  const double deadline = now_s() + 5;
  while ((r1.pending() || r2.pending()) && now_s() < deadline) e->progress();
  if (r1.pending() || r2.pending()) __builtin_trap();  // a closed peer must end every receive
  return 0;
}
