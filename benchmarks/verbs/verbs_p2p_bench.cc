// Point-to-point bandwidth and latency over the uccl verbs endpoint, perftest style.
//
//   verbs_p2p_bench bw  SIZE[,SIZE...] [--hca0 =rxe0] [--hca1 =rxe1] [--qps N] [--secs S]
//   verbs_p2p_bench lat SIZE[,SIZE...] [--iters N] ...
//
// Two processes (fork) joined by a loopback TCP socket, rank 0 on hca0 sends to rank 1 on hca1
// (the direction of `ib_write_bw -d rxe0 ... 10.77.0.2` against a server on rxe1).
//  bw : a window of messages in flight, reposted as they complete (like ib_write_bw's tx
//       depth); MB/s with MB = 2^20 bytes, as perftest prints; measured on the sender.
//       --idle-yield N --idle-sleep-us U: back off after N idle progress calls (see step()).
//  lat: ping-pong; prints half the round trip (typical = median, and average) in microseconds,
//       comparable to ib_write_lat's t_typical / t_avg.
// Output lines: "RESULT bw <bytes> <MB/s> <msgs>" and "RESULT lat <bytes> <typ_us> <avg_us>".
// Built and run by benchmarks/verbs/p2p_vs_perftest.sh inside vm-run.
#include <sched.h>
#include <x86intrin.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "verbs_pair.h"

using namespace uccl;
using vmtest::Rank;

namespace {

struct Args {
  std::string mode;
  std::vector<size_t> sizes;
  std::string hca0 = "=rxe0", hca1 = "=rxe1";
  int qps = 1;
  double secs = 3;
  int iters = 2000;
  int idle_yield = 4;   // after this many idle progress calls the engine backs off:
  int idle_sleep_us = 200;  // it naps this long (0: sched_yield() instead)
  int window = 0;       // messages in flight (0: 32 MiB worth, 8..128)
};

Args g_args;

// One bandwidth-loop progress step with an engine's back-off (progress() returning false is the
// engine's cue): under Soft-RoCE the kernel does the NIC's work on the same two virtual CPUs,
// so two ranks spinning flat out starve it (measured: ~60% of ib_write_bw at 1 MiB with
// sched_yield() only, ~parity with 200 us naps). ib_write_bw's server does not poll at all.
// The latency test spins (as ib_write_lat does).
void step(uccl::Endpoint* ep, int* idle) {
  if (ep->progress()) {
    *idle = 0;
  } else if (g_args.idle_yield > 0 && ++*idle >= g_args.idle_yield) {
    if (g_args.idle_sleep_us > 0) usleep(static_cast<useconds_t>(g_args.idle_sleep_us));
    else sched_yield();
    *idle = 0;
  }
}

Envelope env_for(uint64_t op) {
  Envelope e;
  e.op_seq = op;
  e.coll = 8;
  return e;
}

// Both ranks: a zero-byte exchange, so that timing starts with both sides ready.
bool sync(Rank& r, uint64_t op) {
  SendRequest s;
  s.env = env_for(op);
  RecvRequest q;
  q.expect = env_for(op);
  r.ep->post_recv(&q);
  r.ep->post_send(&s);
  return vmtest::wait_all(r.ep.get(), {&s, &q}) && s.state == ReqState::kDone && q.state == ReqState::kDone;
}

int bandwidth(Rank& r, size_t bytes, double secs) {
  const int window = g_args.window > 0 ? g_args.window
                                       : static_cast<int>(std::min<size_t>(128, std::max<size_t>(8, (32u << 20) / bytes)));
  // Messages to move: enough for ~secs at the rate a warm-up measures.
  std::vector<char> buf(bytes, 'x');
  std::vector<SendRequest> s(window);
  std::vector<RecvRequest> q(window);
  auto run = [&](long total, double* elapsed) -> bool {
    long posted = 0, done = 0, spins = 0;
    int idle = 0;
    double t0 = vmtest::now_s();
    while (done < total) {
      int slot = static_cast<int>(done % window);
      while (posted < total && posted - done < window) {
        int k = static_cast<int>(posted % window);
        if (r.rank == 0) {
          s[k].data = buf.data(), s[k].bytes = bytes, s[k].env = env_for(1000 + posted);
          r.ep->post_send(&s[k]);
        } else {
          q[k].dst = buf.data(), q[k].bytes = bytes, q[k].expect = env_for(1000 + posted);
          r.ep->post_recv(&q[k]);
        }
        ++posted;
      }
      step(r.ep.get(), &idle);
      Request* head = r.rank == 0 ? static_cast<Request*>(&s[slot]) : &q[slot];
      if (!head->pending()) {
        if (head->state != ReqState::kDone) {
          std::fprintf(stderr, "bw: %s\n", head->error.to_string().c_str());
          return false;
        }
        ++done;
      }
      if (++spins % 1024 == 0 && vmtest::now_s() - t0 > 120) return false;  // clock reads are slow in the VM
    }
    *elapsed = vmtest::now_s() - t0;
    return true;
  };
  double warm = 0;
  long warm_msgs = std::max<long>(window, static_cast<long>((8u << 20) / bytes));
  if (!sync(r, 1) || !run(warm_msgs, &warm)) return 1;
  // Both ranks must agree on the count: rank 0 decides, and sends it.
  long total = static_cast<long>(secs * warm_msgs / std::max(warm, 1e-3));
  total = std::max<long>(total, 2L * window);
  SendRequest ts;
  RecvRequest tq;
  if (r.rank == 0) {
    ts.data = &total, ts.bytes = sizeof total, ts.env = env_for(2);
    r.ep->post_send(&ts);
  } else {
    tq.dst = &total, tq.bytes = sizeof total, tq.expect = env_for(2);
    r.ep->post_recv(&tq);
  }
  if (!vmtest::wait_all(r.ep.get(), {r.rank == 0 ? static_cast<Request*>(&ts) : &tq})) return 1;
  if (!sync(r, 3)) return 1;
  double elapsed = 0;
  if (!run(total, &elapsed)) return 1;
  if (r.rank == 0)
    std::printf("RESULT bw %zu %.2f %ld\n", bytes, static_cast<double>(bytes) * total / elapsed / (1 << 20), total);
  return sync(r, 4) ? 0 : 1;
}

int latency(Rank& r, size_t bytes, int iters) {
  std::vector<char> out(bytes + 1, 'p'), in(bytes + 1);
  std::vector<double> rtt;
  if (!sync(r, 1)) return 1;
  const int warmup = std::min(100, iters / 10), total = warmup + iters;
  // Like ib_write_lat, nobody waits for its own send to be acknowledged before going on: two
  // send requests alternate (the older one is long done when it is reused). The receive for
  // message i+1 is posted before the send of message i, so it is always ready in time.
  SendRequest s[2];
  RecvRequest q[2];
  auto post_recv = [&](int i) {
    RecvRequest& x = q[i & 1];
    x.dst = in.data(), x.bytes = bytes, x.expect = env_for(10 + i);
    r.ep->post_recv(&x);
  };
  auto post_send = [&](int i) -> bool {
    SendRequest& x = s[i & 1];
    if (i >= 2 && (!vmtest::wait_all(r.ep.get(), {&x}) || x.state != ReqState::kDone)) return false;
    x.data = out.data(), x.bytes = bytes, x.env = env_for(10 + i);
    r.ep->post_send(&x);
    return true;
  };
  post_recv(0);
  // Round trips are timed with the TSC (as perftest does), calibrated against the clock over the
  // whole run: the VM's clock source (HPET) costs microseconds per read.
  const double c0 = vmtest::now_s();
  const uint64_t k0 = __rdtsc();
  std::vector<uint64_t> ticks;
  for (int i = 0; i < total; ++i) {
    uint64_t t0 = __rdtsc();
    if (r.rank == 0 && !post_send(i)) return 1;  // ping i
    if (!vmtest::wait_all(r.ep.get(), {&q[i & 1]}) || q[i & 1].state != ReqState::kDone) return 1;
    if (i + 1 < total) post_recv(i + 1);
    if (r.rank == 1 && !post_send(i)) return 1;  // pong i
    if (r.rank == 0 && i >= warmup) ticks.push_back(__rdtsc() - t0);
  }
  const double sec_per_tick = (vmtest::now_s() - c0) / static_cast<double>(__rdtsc() - k0);
  for (uint64_t t : ticks) rtt.push_back(t * sec_per_tick);
  if (!vmtest::wait_all(r.ep.get(), {&s[0], &s[1]})) return 1;
  if (r.rank == 0) {
    std::sort(rtt.begin(), rtt.end());
    double sum = 0;
    for (double t : rtt) sum += t;
    std::printf("RESULT lat %zu %.2f %.2f\n", bytes, rtt[rtt.size() / 2] / 2 * 1e6, sum / rtt.size() / 2 * 1e6);
  }
  return sync(r, 2) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  Args& a = g_args;
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s bw|lat SIZE[,SIZE..] [--hca0 S] [--hca1 S] [--qps N] [--secs S] [--iters N]\n",
                 argv[0]);
    return 2;
  }
  a.mode = argv[1];
  for (char* p = argv[2]; *p;) {
    a.sizes.push_back(std::strtoull(p, &p, 10));
    if (*p == ',') ++p;
  }
  for (int i = 3; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--hca0") a.hca0 = v;
    else if (k == "--hca1") a.hca1 = v;
    else if (k == "--qps") a.qps = std::atoi(v.c_str());
    else if (k == "--secs") a.secs = std::atof(v.c_str());
    else if (k == "--iters") a.iters = std::atoi(v.c_str());
    else if (k == "--idle-yield") a.idle_yield = std::atoi(v.c_str());
    else if (k == "--window") a.window = std::atoi(v.c_str());
    else if (k == "--idle-sleep-us") a.idle_sleep_us = std::atoi(v.c_str());
  }
  VerbsOptions o = VerbsOptions::from_config();
  o.qps_per_connection = a.qps;
  int rc = 0;
  for (size_t bytes : a.sizes) {
    bool ok = vmtest::run_pair(a.hca0, a.hca1, o, [&](Rank& r) {
      if (r.rank == 0) std::printf("# %s %zu bytes over %s\n", a.mode.c_str(), bytes, r.ep->describe().c_str());
      return a.mode == "bw" ? bandwidth(r, bytes, a.secs) : latency(r, bytes, a.iters);
    }, 300);
    if (!ok) {
      std::fprintf(stderr, "%s %zu failed\n", a.mode.c_str(), bytes);
      rc = 1;
    }
  }
  return rc;
}
