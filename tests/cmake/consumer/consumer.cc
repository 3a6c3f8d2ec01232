// Builds against the installed uccl only (include/uccl): a one-rank communicator over its own
// TCP store runs an all_reduce and checks the result.
#include <cstdio>
#include <memory>
#include <vector>

#include "uccl/communicator.h"
#include "uccl/tcp_store.h"

int main() {
  auto server = uccl::TcpStoreServer::start("127.0.0.1", 0);
  if (!server.ok()) return std::printf("store: %s\n", server.status().to_string().c_str()), 1;
  auto store = uccl::connect_tcp_store("127.0.0.1", server.value()->port(), 30);
  if (!store.ok()) return std::printf("connect: %s\n", store.status().to_string().c_str()), 1;
  auto comm = uccl::Communicator::create(0, 1, store.value());
  if (!comm.ok()) return std::printf("create: %s\n", comm.status().to_string().c_str()), 1;
  std::vector<float> x = {1, 2, 3};
  auto w = comm.value()->all_reduce({x.data(), x.data(), x.size(), uccl::DataType::kFloat32, uccl::RedOp::kSum});
  uccl::Status s = w.ok() ? w.value()->wait(30) : w.status();
  if (!s.ok() || x[2] != 3) return std::printf("all_reduce: %s\n", s.to_string().c_str()), 1;
  std::printf("consumer ok\n");
  return 0;
}
