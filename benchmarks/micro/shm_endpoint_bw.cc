// Micro benchmark of one shm Endpoint pair in two processes (fork), ring path vs CMA.
//
// Build (after `cmake --build build/dev`), from the repository root:
//   g++ -O2 -std=c++17 -Iinclude -Icpp -I. benchmarks/micro/shm_endpoint_bw.cc build/dev/libuccl.so
//       -Wl,-rpath,$PWD/build/dev -o build/dev/shm_endpoint_bw
// Run: build/dev/shm_endpoint_bw [reps=31] [scope=full|quick|lat] [kind=both|ring|cma]
//                                [ring=4M] [piece=64K] [chunk=1M] [bounce=128K] [cma_min=1M] [cma_max=16M]
//                                [sizes=64K,1M,...] [bind=1]
//   bind=1 pins the two processes to different CPUs (as mpirun does by default).
//   quick: 64 KiB and 1 MiB only; lat: latency lines only; kind: which connections to measure;
//   the rest override ShmOptions (defaults come from the UCCL_SHM_* settings).
//
// Every number is the median (and the best) over `reps` short samples (about a millisecond or
// one message each, after a barrier), so that a preempted sample on a shared machine moves
// the median little. Measures:
//  * ping-pong latency of 8 bytes (half round trip)
//  * unidirectional and bidirectional bandwidth at 64 KiB, 1 MiB, 16 MiB, 64 MiB
//  * "reduce step": both sides send N bytes and reduce-receive N bytes of float32 (the step of
//    a 2-rank ring reduce-scatter), GB/s per direction
//  * a 2-rank ring allreduce built from those steps (reduce-scatter step + allgather step on
//    halves), reported as nccl-tests busbw (= size / time for 2 ranks) to compare with MPI,
//    and for small sizes the direct allreduce (one exchange with a reduce receive) in us.
// Each is run over a connection with CMA off (ring only) and with CMA on (messages from
// cma_min to cma_max, 1 MiB to 16 MiB by default, by CMA).
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "transports/shm/shm_transport.h"

using namespace uccl;

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void die(const char* what) {
  std::fprintf(stderr, "shm_endpoint_bw: %s\n", what);
  std::exit(1);
}

void write_string(int fd, const std::string& s) {
  uint32_t n = static_cast<uint32_t>(s.size());
  if (write(fd, &n, 4) != 4 || write(fd, s.data(), n) != static_cast<ssize_t>(n)) die("write");
}
std::string read_string(int fd) {
  uint32_t n = 0;
  if (read(fd, &n, 4) != 4) die("read");
  std::string s(n, '\0');
  for (size_t got = 0; got < n;) {
    ssize_t k = read(fd, &s[got], n - got);
    if (k <= 0) die("read");
    got += static_cast<size_t>(k);
  }
  return s;
}

struct Peer {
  Endpoint* ep;
  bool parent;
  uint64_t seq = 0;
  Envelope next() {
    Envelope e;
    e.op_seq = ++seq;
    return e;
  }
};

void wait(Peer& p, std::initializer_list<Request*> reqs) {
  for (;;) {
    bool pending = false;
    for (Request* r : reqs) {
      if (r->state == ReqState::kFailed) die(r->error.to_string().c_str());
      pending |= r->pending();
    }
    if (!pending) return;
    p.ep->progress();
  }
}

// Pins the calling process to the n-th CPU it may run on (mpirun binds ranks to cores the
// same way). Without it, two spinning ranks on a busy 2-core host often share one core and
// the numbers measure the scheduler instead of the transport.
cpu_set_t g_allowed_cpus;  // the affinity the program started with

void bind_to_nth_cpu(int n) {
  const cpu_set_t& allowed = g_allowed_cpus;
  if (CPU_COUNT(&allowed) < 2) return;
  for (int cpu = 0, seen = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed) || seen++ != n) continue;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    sched_setaffinity(0, sizeof one, &one);
    return;
  }
}

void send(Peer& p, const void* data, size_t bytes) {
  SendRequest s;
  s.data = data;
  s.bytes = bytes;
  s.env = p.next();
  p.ep->post_send(&s);
  wait(p, {&s});
}
void recv(Peer& p, void* dst, size_t bytes) {
  RecvRequest r;
  r.dst = dst;
  r.bytes = bytes;
  r.expect = p.next();
  p.ep->post_recv(&r);
  wait(p, {&r});
}
void barrier(Peer& p) {
  uint64_t x = 0;
  if (p.parent) {
    send(p, &x, 8);
    recv(p, &x, 8);
  } else {
    recv(p, &x, 8);
    send(p, &x, 8);
  }
}

// One exchange: send `out` and receive into `in` at once (reduce: in = in + incoming).
void exchange(Peer& p, const void* out, void* in, size_t bytes, bool reduce) {
  SendRequest s;
  s.data = out;
  s.bytes = bytes;
  s.env = p.next();
  RecvRequest r;
  r.dst = in;
  r.bytes = bytes;
  r.expect = s.env;
  r.reduce = reduce;
  r.dtype = DataType::kFloat32;
  r.op = RedOp::kSum;
  p.ep->post_send(&s);
  p.ep->post_recv(&r);
  wait(p, {&s, &r});
}

double pingpong(Peer& p, int iters) {
  uint64_t x = 0;
  barrier(p);
  const double t0 = now_s();
  for (int i = 0; i < iters; ++i) {
    if (p.parent) {
      send(p, &x, 8);
      recv(p, &x, 8);
    } else {
      recv(p, &x, 8);
      send(p, &x, 8);
    }
  }
  return (now_s() - t0) / iters / 2;
}

// Parent streams `iters` messages with up to kWindow in flight; the child receives and acks.
double unidirectional(Peer& p, char* buf, size_t bytes, int iters) {
  constexpr int kWindow = 4;
  barrier(p);
  const double t0 = now_s();
  std::vector<SendRequest> s(kWindow);
  std::vector<RecvRequest> r(kWindow);
  for (int i = 0; i < iters; ++i) {
    const int slot = i % kWindow;
    if (p.parent) {
      if (i >= kWindow) wait(p, {&s[slot]});
      s[slot] = SendRequest();
      s[slot].data = buf;
      s[slot].bytes = bytes;
      s[slot].env = p.next();
      p.ep->post_send(&s[slot]);
    } else {
      if (i >= kWindow) wait(p, {&r[slot]});
      r[slot] = RecvRequest();
      r[slot].dst = buf;
      r[slot].bytes = bytes;
      r[slot].expect = p.next();
      p.ep->post_recv(&r[slot]);
    }
  }
  for (int k = 0; k < kWindow && k < iters; ++k) wait(p, {p.parent ? static_cast<Request*>(&s[k]) : &r[k]});
  uint64_t ack = 0;
  if (p.parent) recv(p, &ack, 8); else send(p, &ack, 8);
  return (now_s() - t0) / iters;
}

double bidirectional(Peer& p, char* out, char* in, size_t bytes, int iters, bool reduce) {
  barrier(p);
  const double t0 = now_s();
  for (int i = 0; i < iters; ++i) exchange(p, out, in, bytes, reduce);
  return (now_s() - t0) / iters;
}

// 2-rank ring allreduce of `bytes` (float32): reduce-scatter step, then allgather step.
double allreduce2(Peer& p, char* data, size_t bytes, int iters) {
  const size_t half = bytes / 2;
  const int me = p.parent ? 0 : 1;
  char* mine = data + me * half;
  char* theirs = data + (1 - me) * half;
  barrier(p);
  const double t0 = now_s();
  for (int i = 0; i < iters; ++i) {
    exchange(p, theirs, mine, half, true);   // I own `mine`: receive the peer's part and add
    exchange(p, mine, theirs, half, false);  // then swap the reduced halves
  }
  return (now_s() - t0) / iters;
}

enum class Scope { kFull, kQuick, kLatency };

struct Stat {
  double median, best;
};

template <class F>
Stat repeat(int reps, F f) {
  f();  // warm-up sample: first-touch faults, CMA page pinning caches
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) t.push_back(f());
  std::sort(t.begin(), t.end());
  return Stat{t[t.size() / 2], t[0]};
}

void suite(Peer& p, bool cma, int reps, Scope scope, const std::vector<size_t>& only_sizes) {
  const bool quick = scope != Scope::kFull;
  std::vector<size_t> sizes = quick ? std::vector<size_t>{64 << 10, 1 << 20} :
                                      std::vector<size_t>{64 << 10, 1 << 20, 16 << 20, 64 << 20};
  if (!only_sizes.empty()) sizes = only_sizes;
  const size_t max_bytes = sizes.back();
  std::vector<char> out(max_bytes, 1), in(max_bytes, 2);
  std::vector<float> fl(max_bytes / 4, 0.0f);
  char* fdata = reinterpret_cast<char*>(fl.data());
  auto say = [&](const char* fmt, auto... args) {
    if (p.parent) std::printf(fmt, args...);
  };
  say("\n== %s ==\n", cma ? "CMA on (cma_min <= message <= cma_max: process_vm_readv)" : "ring only (CMA off)");
  const Stat lat = repeat(reps, [&] { return pingpong(p, 200); });
  say("ping-pong 8 B: %.3f us half round trip (best %.3f)\n", lat.median * 1e6, lat.best * 1e6);
  for (size_t n : {size_t(8), size_t(1024), size_t(8192), size_t(65536)}) {
    // Small allreduces: the ring (two steps on halves) and the direct algorithm (one exchange
    // of the whole vector with a reduce receive), which is what small messages would use.
    const Stat ring = repeat(reps, [&] { return allreduce2(p, fdata, n, 100); });
    const Stat direct = repeat(reps, [&] { return bidirectional(p, out.data(), fdata, n, 100, true); });
    say("allreduce %6zu B float32: ring %.2f us (best %.2f), direct %.2f us (best %.2f)\n", n, ring.median * 1e6,
        ring.best * 1e6, direct.median * 1e6, direct.best * 1e6);
  }
  if (scope == Scope::kLatency) return;
  say("GB/s, median (best) over %d samples\n", reps);
  say("%10s %18s %18s %18s %18s\n", "bytes", "unidirectional", "bidir per dir", "reduce step/dir", "allreduce2 busbw");
  for (size_t n : sizes) {
    const int iters = static_cast<int>(std::max<size_t>(1, (4u << 20) / n));
    const Stat uni = repeat(reps, [&] { return unidirectional(p, p.parent ? out.data() : in.data(), n, iters); });
    const Stat bi = repeat(reps, [&] { return bidirectional(p, out.data(), in.data(), n, iters, false); });
    const Stat red = repeat(reps, [&] { return bidirectional(p, out.data(), fdata, n, iters, true); });
    const Stat ar = repeat(reps, [&] { return allreduce2(p, fdata, n, iters); });
    auto cell = [&](const Stat& st) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.2f (%.2f)", n / st.median / 1e9, n / st.best / 1e9);
      return std::string(buf);
    };
    say("%10zu %18s %18s %18s %18s\n", n, cell(uni).c_str(), cell(bi).c_str(), cell(red).c_str(), cell(ar).c_str());
  }
}
struct Args {
  int reps = 31;
  Scope scope = Scope::kFull;
  std::string kind = "both";
  std::vector<size_t> sizes;  // overrides the scope's sizes
  bool bind = true;           // one CPU per process, like mpirun --bind-to core
  ShmOptions opt = ShmOptions::from_config();
};

size_t parse_size(const std::string& v) {
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (*end == 'K' || *end == 'k') x *= 1024;
  if (*end == 'M' || *end == 'm') x *= 1024 * 1024;
  return static_cast<size_t>(x);
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    const size_t eq = s.find('=');
    if (eq == std::string::npos) die(("arguments are key=value: " + s).c_str());
    const std::string k = s.substr(0, eq), v = s.substr(eq + 1);
    if (k == "reps") a.reps = std::max(1, std::atoi(v.c_str()));
    else if (k == "scope") a.scope = v == "quick" ? Scope::kQuick : v == "lat" ? Scope::kLatency : Scope::kFull;
    else if (k == "kind") a.kind = v;
    else if (k == "bind") a.bind = v != "0";
    else if (k == "sizes") {
      for (size_t pos = 0; pos < v.size();) {
        size_t comma = v.find(',', pos);
        if (comma == std::string::npos) comma = v.size();
        a.sizes.push_back(parse_size(v.substr(pos, comma - pos)));
        pos = comma + 1;
      }
    }
    else if (k == "ring") a.opt.ring_bytes = parse_size(v);
    else if (k == "piece") a.opt.piece_bytes = parse_size(v);
    else if (k == "chunk") a.opt.cma_chunk_bytes = parse_size(v);
    else if (k == "bounce") a.opt.cma_bounce_bytes = parse_size(v);
    else if (k == "cma_min") a.opt.cma_min_bytes = parse_size(v);
    else if (k == "cma_max") a.opt.cma_max_bytes = parse_size(v);
    else die(("unknown argument " + k).c_str());
  }
  return a;
}

void run(bool cma, const Args& args) {
  ShmOptions opt = args.opt;
  opt.cma = cma;
  const int reps = args.reps;
  const Scope scope = args.scope;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) die("socketpair");
  std::fflush(nullptr);
  const pid_t child = fork();
  if (child < 0) die("fork");
  PeerContext ctx;
  ctx.peer_host = "localhost";
  auto t = make_shm_transport(opt);
  std::unique_ptr<Endpoint> ep;
  if (child == 0) {
    close(sv[0]);
    std::string answer;
    Result<Endpoint*> r = t->accept(ctx, read_string(sv[1]), &answer, {sv[1]});
    if (!r.ok()) die(r.status().to_string().c_str());
    write_string(sv[1], answer);
    ep.reset(r.value());
  } else {
    close(sv[1]);
    Result<PendingConnect*> pc = t->start_connect(ctx);
    if (!pc.ok()) die(pc.status().to_string().c_str());
    std::unique_ptr<PendingConnect> pending(pc.value());
    write_string(sv[0], pending->offer());
    Result<Endpoint*> r = pending->finish(read_string(sv[0]), {sv[0]});
    if (!r.ok()) die(r.status().to_string().c_str());
    ep.reset(r.value());
  }
  if (args.bind) bind_to_nth_cpu(child == 0 ? 1 : 0);
  Peer p{ep.get(), child != 0};
  barrier(p);  // both sides have finished setup: CMA verdicts are known
  if (p.parent) std::printf("endpoint: %s\n", ep->describe().c_str());
  suite(p, cma, reps, scope, args.sizes);
  barrier(p);
  ep.reset();
  if (child == 0) _exit(0);
  if (args.bind) sched_setaffinity(0, sizeof g_allowed_cpus, &g_allowed_cpus);  // unbind for the next fork
  int status = 0;
  waitpid(child, &status, 0);
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse_args(argc, argv);
  if (sched_getaffinity(0, sizeof g_allowed_cpus, &g_allowed_cpus) != 0) CPU_ZERO(&g_allowed_cpus);
  std::printf("ring %zu, piece %zu, cma chunk %zu, cma bounce %zu, cma min %zu, cma max %zu\n", args.opt.ring_bytes,
              args.opt.piece_bytes, args.opt.cma_chunk_bytes, args.opt.cma_bounce_bytes, args.opt.cma_min_bytes,
              args.opt.cma_max_bytes);
  if (args.kind != "cma") run(false, args);
  if (args.kind != "ring") run(true, args);
  return 0;
}
