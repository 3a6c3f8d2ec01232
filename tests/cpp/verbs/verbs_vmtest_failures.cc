// Verbs VM tests, part 2: availability answers, the registration cache (reuse, and buffers
// freed and reallocated at the same address), peers killed mid-transfer, fail_all().
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "verbs_vmtest.h"

using namespace uccl;

namespace vmtest {

bool availability_checks() {
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    const int rc = uccl_test::child_exit_code([] {
    setenv("UCCL_IB_HCA", "nomatch_hca_zz", 1);  // before the first config() in this process
    std::string why;
    REQUIRE(!verbs_available(&why));
    std::printf("  UCCL_IB_HCA=nomatch_hca_zz: %s\n", why.c_str());
    REQUIRE((why.find("matches none") != std::string::npos && why.find("rxe0:1") != std::string::npos));
    REQUIRE(list_verbs_nics().empty());
    REQUIRE(verbs_available("=rxe1", &why));
    std::vector<VerbsNic> nics = list_verbs_nics("");
    REQUIRE(nics.size() == 2);
    for (const VerbsNic& n : nics) {
      std::printf("  nic %s: %s %s gid-idx %d mtu %d %.1f Gbit/s fabric %s netdev %s%s\n", n.name.c_str(),
                  n.link_layer.c_str(), n.address.c_str(), n.gid_index, n.mtu, n.gbps, n.fabric.c_str(),
                  n.netdev.c_str(), n.active ? "" : " (down)");
      REQUIRE((n.link_layer == "roce" && n.gid_index == 1 && n.active));
      REQUIRE(n.fabric == "roce:10.77.0.0/24");
      REQUIRE(n.address.find("::ffff:10.77.0.") == 0);
    }
    verbs_set_library_for_testing("libibverbs-missing-for-test.so.1");
    REQUIRE(!verbs_available("", &why));
    std::printf("  without libibverbs: %s\n", why.c_str());
    REQUIRE(why.find("libibverbs-missing-for-test.so.1") != std::string::npos);
    REQUIRE(list_verbs_nics("").empty());
    auto t = make_verbs_transport();
    auto pc = t->start_connect(PeerContext());
    REQUIRE((!pc.ok() && pc.status().code() == Code::kNotSupported));
    verbs_set_library_for_testing("");
    REQUIRE(verbs_available("", &why));
    return 0;
    });
    std::fflush(nullptr);
    std::_Exit(rc);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

// Rank 0 sends from, rank 1 receives into, mmap'ed buffers that are reused, then unmapped and
// mapped again at the same address with other content and size: the cache must notice.
static int transfer(Rank& r, void* buf, size_t n, uint32_t seed, uint64_t op) {
  SendRequest s;
  RecvRequest q;
  if (r.rank == 0) {
    fill(buf, n, seed);
    s.data = buf, s.bytes = n, s.env = env(op);
    r.ep->post_send(&s);
  } else {
    std::memset(buf, 0, n);
    q.dst = buf, q.bytes = n, q.expect = env(op);
    r.ep->post_recv(&q);
  }
  Request* mine = r.rank == 0 ? static_cast<Request*>(&s) : &q;
  REQUIRE(wait_all(r.ep.get(), {mine}));
  REQUIRE(mine->state == ReqState::kDone);
  if (r.rank == 1 && !check_fill(buf, n, seed)) {
    std::fprintf(stderr, "[rank 1] data of transfer %llu (%zu bytes) is wrong: stale registration?\n",
                 static_cast<unsigned long long>(op), n);
    return 1;
  }
  return 0;
}

static void* map_at(void* want, size_t n) {
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | (want ? MAP_FIXED_NOREPLACE : 0);
  void* p = mmap(want, n, PROT_READ | PROT_WRITE, flags, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

int mr_cache(Rank& r) {
  const size_t kA = 4 << 20, kB = (2 << 20) + 12345;
  void* buf = map_at(nullptr, kA);
  REQUIRE(buf);
  REQUIRE(transfer(r, buf, kA, 1, 1) == 0);
  VerbsMrCacheStats s1 = verbs_mr_cache_stats();
  REQUIRE(transfer(r, buf, kA, 2, 2) == 0);  // same buffer again
  VerbsMrCacheStats s2 = verbs_mr_cache_stats();
  std::printf("  [rank %d] page check %s; after reuse: %llu registrations, %llu hits\n", r.rank,
              s2.page_check ? "on" : "off", (unsigned long long)s2.registrations, (unsigned long long)s2.hits);
  if (s2.page_check) {
    REQUIRE((s2.registrations == s1.registrations && s2.hits == s1.hits + 1));
  } else {
    REQUIRE(s2.registrations == s1.registrations + 1);
  }
  // Free, reallocate at the same address with another size and content.
  REQUIRE(munmap(buf, kA) == 0);
  void* again = map_at(buf, kB);
  REQUIRE(again == buf);
  REQUIRE(transfer(r, again, kB, 3, 3) == 0);
  VerbsMrCacheStats s3 = verbs_mr_cache_stats();
  if (s3.page_check) REQUIRE(s3.stale == s2.stale + 1);
  std::printf("  [rank %d] after free+realloc: %llu stale detected, %llu registrations\n", r.rank,
              (unsigned long long)s3.stale, (unsigned long long)s3.registrations);

  // The unprivileged mode: no registration outlives its request; still correct after remap.
  verbs_mr_cache_set_page_check_for_testing(false);
  REQUIRE(transfer(r, again, kB, 4, 4) == 0);
  REQUIRE(transfer(r, again, kB, 5, 5) == 0);
  VerbsMrCacheStats s4 = verbs_mr_cache_stats();
  REQUIRE((s4.registrations == s3.registrations + 2 && s4.entries == 0));
  REQUIRE(munmap(again, kB) == 0);
  void* third = map_at(buf, kA);
  REQUIRE(third == buf);
  REQUIRE(transfer(r, third, kA, 6, 6) == 0);

  // Explicit invalidation (an allocator's free hook).
  verbs_mr_cache_set_page_check_for_testing(true);
  REQUIRE(transfer(r, third, kA, 7, 7) == 0);
  VerbsMrCacheStats s5 = verbs_mr_cache_stats();
  verbs_mr_cache_invalidate(third, kA);
  VerbsMrCacheStats s6 = verbs_mr_cache_stats();
  if (s5.page_check) REQUIRE((s6.entries + 1 == s5.entries && s6.deregistrations == s5.deregistrations + 1));
  REQUIRE(transfer(r, third, kA, 8, 8) == 0);
  munmap(third, kA);
  return 0;
}

// Posts message i of a stream (rank 0 sends, rank 1 receives).
static void post_msg(Rank& r, int i, std::vector<std::vector<uint8_t>>& bufs, std::vector<SendRequest>& s,
                     std::vector<RecvRequest>& q) {
  if (r.rank == 0) {
    s[i].data = bufs[i].data(), s[i].bytes = bufs[i].size(), s[i].env = env(1, i);
    r.ep->post_send(&s[i]);
  } else {
    q[i].dst = bufs[i].data(), q[i].bytes = bufs[i].size(), q[i].expect = env(1, i);
    r.ep->post_recv(&q[i]);
  }
}

// Silent packet loss on one veth (netem, 100%): the port stays up, packets vanish.
static const char* kDropOn0 = "tc qdisc add dev veth0 root netem loss 100%";
static const char* kDropOn1 = "tc qdisc add dev veth1 root netem loss 100%";
static const char* kRestore0 = "tc qdisc del dev veth0 root";
static const char* kRestore1 = "tc qdisc del dev veth1 root";

// Message 0 goes through; then the `victim` posts the rest (all but the last if it dies) and its
// end goes away: SIGKILL (victim dies), or everything it sends is dropped (cut_link: both live,
// the path dies). The survivor's pending requests must fail with kRemoteError naming device,
// port and peer, in seconds.
static int broken(Rank& r, int victim, bool cut_link, int msgs, size_t bytes) {
  std::vector<std::vector<uint8_t>> bufs(msgs, std::vector<uint8_t>(bytes, 7));
  std::vector<SendRequest> s(msgs);
  std::vector<RecvRequest> q(msgs);
  std::vector<Request*> reqs;
  for (int i = 0; i < msgs; ++i) reqs.push_back(r.rank == 0 ? static_cast<Request*>(&s[i]) : &q[i]);
  const bool is_victim = r.rank == victim;
  for (int i = 0; i < (is_victim ? 1 : msgs); ++i) post_msg(r, i, bufs, s, q);
  REQUIRE((wait_all(r.ep.get(), {reqs[0]}) && reqs[0]->state == ReqState::kDone));
  double t_first = now_s();
  if (is_victim) {
    if (cut_link) REQUIRE(system(r.rank == 1 ? kDropOn1 : kDropOn0) == 0);
    // A victim that dies leaves its last message unposted: Soft-RoCE's kernel driver may still
    // carry out what a process posted before it died, so a posted last message could arrive whole
    // (seen once in CI: the survivor's last receive completed); an unposted one can only fail.
    for (int i = 1; i < (cut_link ? msgs : msgs - 1); ++i) post_msg(r, i, bufs, s, q);
    for (int k = 0; k < 50; ++k) r.ep->progress();  // CTS / writes on the wire
    if (!cut_link) raise(SIGKILL);
  }
  REQUIRE(wait_all(r.ep.get(), {reqs[msgs - 1]}, 60));
  double t_fail = now_s();
  const Status& err = reqs[msgs - 1]->error;
  std::printf("  [rank %d] failed %.2f s after message 0: %s\n", r.rank, t_fail - t_first, err.to_string().c_str());
  if (cut_link && is_victim) {
    REQUIRE(system(r.rank == 1 ? kRestore1 : kRestore0) == 0);
    // Its clear-to-sends could not get through: retries exhausted.
    REQUIRE(err.message().find("retry") != std::string::npos);
  }
  REQUIRE((reqs[msgs - 1]->state == ReqState::kFailed && err.code() == Code::kRemoteError));
  REQUIRE(err.peer() == 1 - r.rank);
  REQUIRE((err.message().find("rxe") != std::string::npos && err.message().find(":1") != std::string::npos));
  REQUIRE(err.message().find("rank " + std::to_string(1 - r.rank)) != std::string::npos);
  REQUIRE(t_fail - t_first < 5.0);
  // Later posts fail at once.
  SendRequest late;
  late.data = bufs[0].data(), late.bytes = 16, late.env = env(2);
  r.ep->post_send(&late);
  REQUIRE((late.state == ReqState::kFailed && late.error.code() == Code::kRemoteError));
  return 0;
}
int killed_receiver(Rank& r) { return broken(r, 1, false, 8, 4 << 20); }
int killed_sender(Rank& r) { return broken(r, 0, false, 8, 4 << 20); }
int retry_exhausted(Rank& r) { return broken(r, 1, true, 6, 1 << 20); }

// fail_all() on one side: its requests fail with the given status; the peer, which stays
// connected, learns through the liveness socket, and why.
int abort_one(Rank& r) {
  std::vector<uint8_t> buf(1 << 20);
  RecvRequest q[2];
  for (auto& x : q) {
    x.dst = buf.data(), x.bytes = buf.size(), x.expect = env(5);
    r.ep->post_recv(&x);
  }
  if (r.rank == 0) {
    for (int i = 0; i < 100; ++i) r.ep->progress();
    r.ep->fail_all(Status(Code::kAborted, "test abort"));
    REQUIRE((q[0].state == ReqState::kFailed && q[0].error.code() == Code::kAborted));
    REQUIRE((q[1].state == ReqState::kFailed && !r.ep->has_pending()));
    RecvRequest late;
    late.dst = buf.data(), late.bytes = 8;
    r.ep->post_recv(&late);
    REQUIRE((late.state == ReqState::kFailed && late.error.code() == Code::kAborted));
    sleep(3);  // stay alive: the peer must learn from fail_all, not from our exit
    return 0;
  }
  double t0 = now_s();
  REQUIRE(wait_all(r.ep.get(), {&q[0], &q[1]}, 20));
  std::printf("  [rank 1] peer's fail_all seen after %.2f s: %s\n", now_s() - t0, q[0].error.to_string().c_str());
  REQUIRE((q[0].state == ReqState::kFailed && q[0].error.code() == Code::kRemoteError));
  // The note written on the liveness socket before the shutdown carries the root cause.
  REQUIRE(q[0].error.message().find("failed and closed the connection; root cause: test abort") != std::string::npos);
  REQUIRE(now_s() - t0 < 3.0);
  return 0;
}

}  // namespace vmtest
