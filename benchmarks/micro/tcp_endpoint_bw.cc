// Loopback bandwidth of one tcp Endpoint pair: unidirectional and bidirectional, for a few
// message sizes and socket counts. Each endpoint is driven by its own thread (busy-polling
// progress()), the way a communicator's progress thread would drive it; a window of messages
// is kept in flight so the pipe never drains between messages. When progress() reports no
// movement the thread sleeps in poll() on wait_fd(), as the engine does.
//
// Build (after building the library in build/dev), one line:
//   g++ -O2 -std=c++17 -Iinclude -Icpp -I. benchmarks/micro/tcp_endpoint_bw.cc -Lbuild/dev -luccl -Wl,-rpath,$PWD/build/dev -lpthread -o build/dev/tcp_endpoint_bw
// Run:  build/dev/tcp_endpoint_bw [total_MiB_per_case=2048] [host=127.0.0.1] [sockets] [msg_KiB]
//       (sockets and msg_KiB pick one case; default: 1 MiB and 64 MiB x 1, 2, 4 sockets)
// Prints GB/s (1e9 bytes/s) of payload; "bidir" is the sum of both directions. Each row also
// shows a plain blocking socket pair moving the same bytes right after, as a yardstick that
// saw the same machine load (loopback numbers swing a lot on a shared machine).
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/net.h"
#include "transports/tcp/tcp_transport.h"

using namespace uccl;

namespace {

struct Pair {
  std::unique_ptr<Endpoint> a, b;
};

Pair connect_pair(int nsocks, const std::string& host) {
  SockAddr addr = parse_address(host, 0).value();
  auto lfd = listen_on(&addr);
  if (!lfd.ok()) {
    std::fprintf(stderr, "listen: %s\n", lfd.status().to_string().c_str());
    std::exit(1);
  }
  std::vector<int> fa, fb;
  for (int i = 0; i < nsocks; ++i) {
    fa.push_back(connect_to(addr, now_s() + 5).value());
    fb.push_back(accept(lfd.value(), nullptr, nullptr));
  }
  close(lfd.value());
  auto t = make_tcp_transport(nsocks);
  PeerContext pa, pb;
  pa.my_rank = pb.peer_rank = 0;
  pa.peer_rank = pb.my_rank = 1;
  std::unique_ptr<PendingConnect> c(t->start_connect(pa).value());
  std::string answer;
  Endpoint* eb = t->accept(pb, c->offer(), &answer, fb).value();
  Endpoint* ea = c->finish(answer, fa).value();
  return Pair{std::unique_ptr<Endpoint>(ea), std::unique_ptr<Endpoint>(eb)};
}

// Keeps `window` sends and/or receives of `bytes` in flight until `count` of each completed.
void drive(Endpoint* ep, bool do_send, bool do_recv, size_t bytes, int count, int window,
           std::atomic<int>* ready, std::atomic<bool>* go, std::atomic<bool>* failed) {
  std::vector<uint8_t> sbuf(do_send ? bytes : 0, 7), rbuf(do_recv ? bytes : 0);
  std::vector<SendRequest> sends(window);
  std::vector<RecvRequest> recvs(window);
  int sent = 0, recvd = 0, sposted = 0, rposted = 0;
  auto post = [&] {
    while (do_send && sposted < count && sposted - sent < window) {
      SendRequest& s = sends[sposted % window];
      s.data = sbuf.data(), s.bytes = bytes, s.env.op_seq = sposted++;
      ep->post_send(&s);
    }
    while (do_recv && rposted < count && rposted - recvd < window) {
      RecvRequest& r = recvs[rposted % window];
      r.dst = rbuf.data(), r.bytes = bytes, r.expect.op_seq = rposted++;
      ep->post_recv(&r);
    }
  };
  ready->fetch_add(1);
  while (!go->load()) {
  }
  post();
  while ((do_send && sent < count) || (do_recv && recvd < count)) {
    if (!ep->progress()) {  // idle: sleep on wait_fd like the engine does (frees the core)
      pollfd pf{ep->wait_fd(), POLLIN, 0};
      poll(&pf, 1, 1);
    }
    while (do_send && sent < sposted && !sends[sent % window].pending()) {
      if (sends[sent % window].state == ReqState::kFailed) {
        std::fprintf(stderr, "send failed: %s\n", sends[sent % window].error.to_string().c_str());
        failed->store(true);
        return;
      }
      ++sent;
    }
    while (do_recv && recvd < rposted && !recvs[recvd % window].pending()) {
      if (recvs[recvd % window].state == ReqState::kFailed) {
        std::fprintf(stderr, "recv failed: %s\n", recvs[recvd % window].error.to_string().c_str());
        failed->store(true);
        return;
      }
      ++recvd;
    }
    post();
  }
}

double run_case(int nsocks, size_t bytes, bool bidir, size_t total_bytes, const std::string& host) {
  Pair p = connect_pair(nsocks, host);
  int count = static_cast<int>(std::max<size_t>(4, total_bytes / bytes));
  int window = bytes >= (16u << 20) ? 2 : 8;
  std::atomic<int> ready{0};
  std::atomic<bool> go{false}, failed{false};
  std::thread ta(drive, p.a.get(), true, bidir, bytes, count, window, &ready, &go, &failed);
  std::thread tb(drive, p.b.get(), bidir, true, bytes, count, window, &ready, &go, &failed);
  while (ready.load() < 2) {
  }
  double t0 = now_s();
  go.store(true);
  ta.join();
  tb.join();
  double dt = now_s() - t0;
  if (failed.load()) std::exit(1);
  return static_cast<double>(bytes) * count * (bidir ? 2 : 1) / dt / 1e9;
}

// Reference: the same traffic on one plain blocking socket pair (a thread per direction and
// side, blocking send/recv of whole messages), measured under the same machine load.
double run_raw(size_t bytes, bool bidir, size_t total_bytes, const std::string& host) {
  SockAddr addr = parse_address(host, 0).value();
  int lfd = listen_on(&addr).value();
  int a = connect_to(addr, now_s() + 5).value(), b = accept(lfd, nullptr, nullptr);
  close(lfd);
  set_socket_options(b);
  int count = static_cast<int>(std::max<size_t>(4, total_bytes / bytes));
  auto sender = [&](int fd) {
    std::vector<uint8_t> buf(bytes, 7);
    for (int i = 0; i < count; ++i) send_all(fd, buf.data(), bytes, now_s() + 60);
  };
  auto receiver = [&](int fd) {
    std::vector<uint8_t> buf(bytes);
    for (int i = 0; i < count; ++i) recv_all(fd, buf.data(), bytes, now_s() + 60);
  };
  double t0 = now_s();
  std::vector<std::thread> ts;
  ts.emplace_back(sender, a);
  ts.emplace_back(receiver, b);
  if (bidir) {
    ts.emplace_back(sender, b);
    ts.emplace_back(receiver, a);
  }
  for (auto& t : ts) t.join();
  double dt = now_s() - t0;
  close(a);
  close(b);
  return static_cast<double>(bytes) * count * (bidir ? 2 : 1) / dt / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  size_t total = (argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 2048) << 20;
  std::string host = argc > 2 ? argv[2] : "127.0.0.1";
  std::printf("tcp endpoint loopback bandwidth over %s, %zu MiB per case (GB/s = 1e9 B/s)\n", host.c_str(), total >> 20);
  std::printf("%-8s %-8s %10s %10s   %s\n", "msg KiB", "sockets", "uni GB/s", "bidir GB/s",
              "(plain blocking socket pair, same run: uni / bidir)");
  std::vector<size_t> sizes = {size_t(1) << 20, size_t(64) << 20};
  std::vector<int> socks = {1, 2, 4};
  if (argc > 3) socks = {std::atoi(argv[3])};
  if (argc > 4) sizes = {std::strtoull(argv[4], nullptr, 10) << 10};
  for (size_t bytes : sizes) {
    for (int nsocks : socks) {
      run_case(nsocks, bytes, false, total / 8, host);  // warm-up (page faults, TCP windows)
      double uni = run_case(nsocks, bytes, false, total, host);
      double bi = run_case(nsocks, bytes, true, total, host);
      double raw_uni = run_raw(bytes, false, total, host), raw_bi = run_raw(bytes, true, total, host);
      std::printf("%-8zu %-8d %10.2f %10.2f   (%.2f / %.2f)\n", bytes >> 10, nsocks, uni, bi, raw_uni, raw_bi);
      std::fflush(stdout);
    }
  }
  return 0;
}
