/* uccl's C API from C under mpirun: rank 0 makes a unique id, MPI_Bcast ships it (as NCCL
 * programs do), every rank joins, then an all_reduce and an asynchronous all_gather.
 *
 *   cmake -S examples/c -B build/ex -Duccl_DIR=$(python -m uccl.info --cmakedir) && cmake --build build/ex
 *   mpirun -np 4 build/ex/allreduce_mpi
 * or: mpicc allreduce_mpi.c $(pkg-config --cflags --libs uccl)
 */
#include <mpi.h>
#include <stdio.h>

#include <uccl/uccl.h>

#define CHECK(call)                                                                                  \
  do {                                                                                               \
    uccl_result_t r_ = (call);                                                                       \
    if (r_ != UCCL_SUCCESS) {                                                                        \
      fprintf(stderr, "%s failed: %s: %s\n", #call, uccl_error_string(r_), uccl_last_error());      \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                                  \
    }                                                                                                \
  } while (0)

int main(int argc, char** argv) {
  int rank, size, i, bad = 0;
  uccl_unique_id id;
  uccl_comm_t comm;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (rank == 0) CHECK(uccl_get_unique_id(&id));
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  CHECK(uccl_comm_init_rank(&comm, size, &id, rank, NULL));

  float x[1024], all[1024 * 16];
  for (i = 0; i < 1024; ++i) x[i] = (float)rank;
  CHECK(uccl_all_reduce(x, x, 1024, uccl_float32, uccl_sum, comm, NULL));
  bad |= x[1023] != size * (size - 1) / 2.0f;

  uccl_request_t req;
  float mine = (float)rank;
  CHECK(uccl_all_gather(&mine, all, 1, uccl_float32, comm, &req));
  CHECK(uccl_wait(req, -1));
  CHECK(uccl_request_free(req));
  for (i = 0; i < size; ++i) bad |= all[i] != (float)i;

  CHECK(uccl_comm_destroy(comm));
  printf("rank %d of %d: uccl %d, all_reduce %g, all_gather %s\n", rank, size, uccl_get_version(), x[0],
         bad ? "WRONG" : "ok");
  MPI_Finalize();
  return bad;
}
