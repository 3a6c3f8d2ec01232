/* Open MPI's all_reduce (or all_gather) time from C, without mpi4py: the reference that says how
 * much of "MPI" in compare.py's table is Python call overhead (it matters only at small sizes).
 *
 *   mpicc -O2 -o /tmp/mpi_c_latency benchmarks/mpi_c_latency.c
 *   mpirun --allow-run-as-root -np 2 /tmp/mpi_c_latency [iters [size,size,... [rounds [allgather]]]]
 *
 * Prints, per size, the median over `rounds` (5) of the rank-averaged time of `iters` blocking
 * MPI_Allreduce calls (float sum, out of place), like compare.py's MPI runner, or of
 * MPI_Allgather calls when the fourth argument is "allgather" (size = the gathered bytes, as
 * nccl-tests and uccl-perf count it: each rank contributes size / ranks). Sizes are in bytes
 * (default 8,64,512,4096,32768,65536); benchmarks/busy_cpu.py passes one at a time. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int iters = argc > 1 ? atoi(argv[1]) : 2000;
  int rounds = argc > 3 ? atoi(argv[3]) : 5;
  if (rounds < 1 || rounds > 32) rounds = 5;
  const int gather = argc > 4 && strcmp(argv[4], "allgather") == 0;
  size_t sizes[32] = {8, 64, 512, 4096, 32768, 65536};
  size_t nsizes = 6, max_bytes = 65536;
  if (argc > 2) {
    nsizes = 0;
    max_bytes = 4;
    for (char* tok = strtok(argv[2], ","); tok && nsizes < 32; tok = strtok(NULL, ",")) {
      sizes[nsizes] = (size_t)strtoull(tok, NULL, 10);
      if (sizes[nsizes] > max_bytes) max_bytes = sizes[nsizes];
      ++nsizes;
    }
  }
  float* s = malloc(max_bytes);
  float* r = malloc(max_bytes);
  for (size_t i = 0; i < max_bytes / 4; ++i) s[i] = r[i] = 1.0f;
  if (rank == 0)
    printf("# %s from C, %d ranks, float%s, %d iters, median of %d rounds\n", gather ? "MPI_Allgather" : "MPI_Allreduce",
           size, gather ? "" : " sum", iters, rounds);
  for (size_t k = 0; k < nsizes; ++k) {
    const int count = (int)(sizes[k] / 4), part = count / size;
#define OP() (gather ? MPI_Allgather(s, part, MPI_FLOAT, r, part, MPI_FLOAT, MPI_COMM_WORLD) \
                     : MPI_Allreduce(s, r, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD))
    double t[32];
    for (int round = 0; round < rounds; ++round) {
      for (int i = 0; i < 10; ++i) OP();
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      for (int i = 0; i < iters; ++i) OP();
      double dt = (MPI_Wtime() - t0) / iters, sum = 0;
      MPI_Allreduce(&dt, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      t[round] = sum / size;
    }
    qsort(t, rounds, sizeof t[0], cmp);
    if (rank == 0) printf("%8zu bytes  %8.2f us\n", sizes[k], t[rounds / 2] * 1e6);
  }
  free(s);
  free(r);
  MPI_Finalize();
  return 0;
}
