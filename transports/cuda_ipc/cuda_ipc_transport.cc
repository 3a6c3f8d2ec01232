// The cuda_ipc transport: connection setup (see cuda_ipc_transport.h). The inner endpoint is
// made by the shm entry of the table (tcp where shm is missing): the offer and answer carry the
// inner transport's offer and answer behind a short prefix naming the inner transport.
#include "transports/cuda_ipc/cuda_ipc_transport.h"

#include <unistd.h>

#include "cuda/cuda_module.h"
#include "transports/cuda_ipc/cuda_ipc_endpoint.h"
#include "transports/registry.h"

namespace uccl {

const TextSetting kCudaIpc("cuda_ipc", "UCCL_CUDA_IPC", "auto",
                           "CUDA IPC between ranks of one host: auto (when CUDA works and the process already "
                           "uses a GPU), on (whenever CUDA works), off",
                           one_of({"auto", "on", "off"}));

bool cuda_ipc_usable(std::string* why) {
  const std::string mode = kCudaIpc.get();
  if (mode == "off") {
    if (why) *why = "UCCL_CUDA_IPC=off";
    return false;
  }
  const CudaModule* m = cuda_module(why);
  if (!m) return false;
  if (mode == "auto" && !m->ipc->context_active()) {
    if (why) *why = "this process has not used a CUDA device yet (UCCL_CUDA_IPC=on forces it)";
    return false;
  }
  return true;
}

namespace {

const TransportEntry* inner_entry() {
  for (const char* name : {"shm", "tcp"}) {
    const TransportEntry* e = find_transport(name);
    std::string why;
    if (e && e->available(&why)) return e;
  }
  return nullptr;
}

class Pending final : public PendingConnect {
 public:
  Pending(std::unique_ptr<Transport> inner_t, PendingConnect* inner, const PeerContext& peer, const CudaModule* m,
          std::string prefix)
      : inner_t_(std::move(inner_t)), inner_(inner), peer_(peer), m_(m), prefix_(std::move(prefix)) {}
  std::string offer() override { return prefix_ + inner_->offer(); }
  Result<Endpoint*> finish(const std::string& answer, const std::vector<int>& fds) override {
    if (answer.compare(0, prefix_.size(), prefix_) != 0) {
      for (int fd : fds) ::close(fd);
      return Status(Code::kRemoteError, "cuda_ipc: " + peer_.describe() + " answered an unknown offer", peer_.peer_rank);
    }
    auto ep = inner_->finish(answer.substr(prefix_.size()), fds);
    if (!ep.ok()) return ep.status();
    return static_cast<Endpoint*>(new cuda_ipc::CudaIpcEndpoint(std::move(inner_t_), std::unique_ptr<Endpoint>(ep.value()),
                                                                peer_, m_, peer_.peer_pid == getpid()));
  }

 private:
  std::unique_ptr<Transport> inner_t_;
  std::unique_ptr<PendingConnect> inner_;
  PeerContext peer_;
  const CudaModule* m_;
  std::string prefix_;
};

class CudaIpcTransport final : public Transport {
 public:
  TransportKind kind() const override { return static_cast<TransportKind>(4); }
  int sockets_per_connection() const override {
    const TransportEntry* e = inner_entry();
    if (!e) return 1;
    if (!probe_) probe_ = e->make();
    return probe_->sockets_per_connection();
  }
  Result<PendingConnect*> start_connect(const PeerContext& peer) override {
    std::string why;
    if (!cuda_ipc_usable(&why)) return NotSupported("cuda_ipc: " + why);
    const TransportEntry* e = inner_entry();
    if (!e) return NotSupported("cuda_ipc: no host transport to run over");
    auto t = e->make();
    auto c = t->start_connect(peer);
    if (!c.ok()) return c.status();
    return static_cast<PendingConnect*>(new Pending(std::move(t), c.value(), peer, cuda_module(nullptr), prefix(e)));
  }
  Result<Endpoint*> accept(const PeerContext& peer, const std::string& offer, std::string* answer,
                           const std::vector<int>& fds) override {
    std::string why;
    if (!cuda_ipc_usable(&why)) return NotSupported("cuda_ipc: " + why);
    const TransportEntry* e = inner_entry();
    if (!e || offer.compare(0, prefix(e).size(), prefix(e)) != 0)
      return NotSupported("cuda_ipc: the peer runs over another host transport");
    auto t = e->make();
    std::string inner_answer;
    auto ep = t->accept(peer, offer.substr(prefix(e).size()), &inner_answer, fds);
    if (!ep.ok()) return ep.status();
    *answer = prefix(e) + inner_answer;
    return static_cast<Endpoint*>(new cuda_ipc::CudaIpcEndpoint(std::move(t), std::unique_ptr<Endpoint>(ep.value()), peer,
                                                               cuda_module(nullptr), peer.peer_pid == getpid()));
  }

 private:
  static std::string prefix(const TransportEntry* e) { return "cuda_ipc1:" + e->name + ":"; }
  mutable std::unique_ptr<Transport> probe_;
};

}  // namespace

std::unique_ptr<Transport> make_cuda_ipc_transport() { return std::make_unique<CudaIpcTransport>(); }

}  // namespace uccl
