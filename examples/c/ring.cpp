// uccl's C API from C++, initialised from a store address (no MPI calls): rank and size come from
// the launcher's environment (mpirun's OMPI_COMM_WORLD_*, torchrun's or Slurm's), the store from
// MASTER_ADDR/MASTER_PORT (rank 0 serves it). Passes a token around a ring with send/recv, then
// splits the world into even and odd ranks.
//
//   MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 mpirun -np 4 -x MASTER_ADDR -x MASTER_PORT build/ex/ring
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include <uccl/uccl.h>

namespace {

void check(uccl_result_t r, const char* what) {
  if (r != UCCL_SUCCESS)
    throw std::runtime_error(std::string(what) + ": " + uccl_error_string(r) + ": " + uccl_last_error());
}

int env_int(std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (const char* v = std::getenv(n)) return std::atoi(v);
  throw std::runtime_error("rank/size not found in the environment (run under mpirun, torchrun or srun)");
}

}  // namespace

int main() {
  try {
    int rank = env_int({"OMPI_COMM_WORLD_RANK", "RANK", "SLURM_PROCID"});
    int size = env_int({"OMPI_COMM_WORLD_SIZE", "WORLD_SIZE", "SLURM_NTASKS"});
    const char* host = std::getenv("MASTER_ADDR");
    uccl_comm_t comm = nullptr;
    uccl_config_t cfg = UCCL_CONFIG_INITIALIZER;
    cfg.timeout_s = 60;
    check(uccl_comm_init_store(&comm, size, rank, host ? host : "127.0.0.1", env_int({"MASTER_PORT"}), &cfg),
          "init");
    long token = rank == 0 ? 1000 : 0;
    if (rank == 0) {
      check(uccl_send(&token, 1, uccl_int64, 1 % size, comm, nullptr), "send");
      check(uccl_recv(&token, 1, uccl_int64, size - 1, comm, nullptr), "recv");
    } else {
      check(uccl_recv(&token, 1, uccl_int64, rank - 1, comm, nullptr), "recv");
      token += rank;
      check(uccl_send(&token, 1, uccl_int64, (rank + 1) % size, comm, nullptr), "send");
    }
    uccl_comm_t half = nullptr;
    check(uccl_comm_split(comm, rank % 2, rank, &half, nullptr), "split");
    int members = 1;
    check(uccl_all_reduce(&members, &members, 1, uccl_int32, uccl_sum, half, nullptr), "all_reduce");
    check(uccl_broadcast(&token, &token, 1, uccl_int64, 0, comm, nullptr), "broadcast");
    bool ok = token == 1000 + static_cast<long>(size) * (size - 1) / 2 && members == (size + 1 - rank % 2) / 2;
    std::printf("rank %d of %d: ring token %ld, %d ranks in my half: %s\n", rank, size, token, members,
                ok ? "ok" : "WRONG");
    check(uccl_comm_destroy(half), "destroy");
    check(uccl_comm_destroy(comm), "destroy");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ring: %s\n", e.what());
    return 1;
  }
}
