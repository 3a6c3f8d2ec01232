// A model of a 2-rank out-of-place all_gather between two processes, without uccl: which
// copies each rank makes and with what. It decided shm's CMA push and tee (RESULTS.md, changes
// 13 and 14): the data movement of each scheme alone, with a barrier per iteration.
//
// Build and run, from the repository root:
//   gcc -O2 -o /tmp/cma_all_gather_model benchmarks/micro/cma_all_gather_model.c
//   /tmp/cma_all_gather_model <block bytes> <scheme> [chunk bytes, default the block]
// Schemes (each rank has `in` (one block) and `out` (two blocks); r = own rank, p = peer):
//   0 pull:        memcpy(out[r], in); process_vm_readv(peer in -> out[p])        (Open MPI, old uccl)
//   1 pull first:  the same, the pull before the copy
//   2 push + tee:  per chunk: memcpy(out[r], in); process_vm_writev(in -> peer out[r])
//   3 pull, write twice: per chunk: readv(peer in -> out[p]); writev(out[p] -> peer out[p])
//   4 interleave:  per chunk: memcpy(out[r], in); readv(peer in -> out[p])
//   5 pull only, 6 copy only, 7 push only (in-place halves of the above)
//   8 push + streaming tee: scheme 2 with non-temporal stores for the copy
// Set THP=1 to back the buffers with transparent huge pages (2 MiB aligned, madvise).
// Prints the time per all_gather on rank 0; any wrong byte in schemes 0-4 and 8 is reported.
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  _Atomic uint64_t bar[2];
  char pad[48];
  uintptr_t in[2], out[2];
  pid_t pid[2];
} Shared;
static Shared* sh;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
static void barrier(int r, uint64_t* gen) {
  ++*gen;
  atomic_store(&sh->bar[r], *gen);
  while (atomic_load(&sh->bar[1 - r]) < *gen) {
  }
}
static void rd(pid_t p, void* l, uintptr_t rem, size_t n) {
  struct iovec a = {l, n}, b = {(void*)rem, n};
  if (process_vm_readv(p, &a, 1, &b, 1, 0) != (ssize_t)n) { perror("process_vm_readv"); exit(1); }
}
static void wr(pid_t p, const void* l, uintptr_t rem, size_t n) {
  struct iovec a = {(void*)l, n}, b = {(void*)rem, n};
  if (process_vm_writev(p, &a, 1, &b, 1, 0) != (ssize_t)n) { perror("process_vm_writev"); exit(1); }
}
static void copy_nt(char* d, const char* s, size_t n) {  // n and d multiples of 64 here
  for (size_t i = 0; i < n; i += 64)
    for (int k = 0; k < 64; k += 16)
      _mm_stream_si128((__m128i*)(d + i + k), _mm_loadu_si128((const __m128i*)(s + i + k)));
  _mm_sfence();
}
static char* buffer(size_t n, int thp) {
  size_t al = thp ? (2u << 20) : 4096, sz = (n + al - 1) / al * al;
  char* p = aligned_alloc(al, sz);
  if (thp) madvise(p, sz, MADV_HUGEPAGE);
  return p;
}

int main(int argc, char** argv) {
  if (argc < 3) { fprintf(stderr, "usage: %s <block bytes> <scheme 0-8> [chunk bytes]\n", argv[0]); return 2; }
  const size_t S = strtoul(argv[1], 0, 0), C = argc > 3 ? strtoul(argv[3], 0, 0) : S;
  const int scheme = atoi(argv[2]), N = 2000, thp = getenv("THP") != NULL;
  if (S == 0 || C == 0 || S % C || S % 64) { fprintf(stderr, "block must be a multiple of chunk and of 64\n"); return 2; }
  sh = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  memset(sh, 0, 4096);
  const int r = fork() == 0 ? 1 : 0, p = 1 - r;
  char *in = buffer(S, thp), *out = buffer(2 * S, thp);
  memset(in, r + 1, S);
  memset(out, 0, 2 * S);
  sh->in[r] = (uintptr_t)in;
  sh->out[r] = (uintptr_t)out;
  sh->pid[r] = getpid();
  uint64_t gen = 0;
  barrier(r, &gen);
  const pid_t peer = sh->pid[p];
  double t0 = 0;
  for (int it = 0; it < N + 100; ++it) {
    if (it == 100) {
      barrier(r, &gen);
      t0 = now();
    }
    switch (scheme) {
      case 0: memcpy(out + r * S, in, S); rd(peer, out + p * S, sh->in[p], S); break;
      case 1: rd(peer, out + p * S, sh->in[p], S); memcpy(out + r * S, in, S); break;
      case 2:
        for (size_t o = 0; o < S; o += C) { memcpy(out + r * S + o, in + o, C); wr(peer, in + o, sh->out[p] + r * S + o, C); }
        break;
      case 3:
        for (size_t o = 0; o < S; o += C) { rd(peer, out + p * S + o, sh->in[p] + o, C); wr(peer, out + p * S + o, sh->out[p] + p * S + o, C); }
        break;
      case 4:
        for (size_t o = 0; o < S; o += C) { memcpy(out + r * S + o, in + o, C); rd(peer, out + p * S + o, sh->in[p] + o, C); }
        break;
      case 5: rd(peer, out + p * S, sh->in[p], S); break;
      case 6: memcpy(out + r * S, in, S); break;
      case 7: wr(peer, in, sh->out[p] + r * S, S); break;
      case 8:
        for (size_t o = 0; o < S; o += C) { copy_nt(out + r * S + o, in + o, C); wr(peer, in + o, sh->out[p] + r * S + o, C); }
        break;
      default: fprintf(stderr, "unknown scheme %d\n", scheme); return 2;
    }
    barrier(r, &gen);
  }
  const double dt = (now() - t0) / N;
  int bad = 0;
  for (size_t i = 0; i < 2 * S; i += 4096) bad += out[i] != (char)(i / S + 1);
  if ((scheme <= 4 || scheme == 8) && bad) printf("rank %d: %d wrong pages\n", r, bad);
  if (r == 0) {
    printf("block %zu scheme %d chunk %zu%s: %.1f us\n", S, scheme, C, thp ? " thp" : "", dt * 1e6);
    wait(NULL);
  }
  return 0;
}
