// The cuda_ipc transport: connection setup (see cuda_ipc_transport.h). The inner endpoint is
// made by the shm entry of the table (tcp where shm is missing): the offer and answer carry the
// inner transport's offer and answer behind a short prefix naming the inner transport.
#include "transports/cuda_ipc/cuda_ipc_transport.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>

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

// Identifies this process in offers and answers: equal tokens mean the peer is a thread of
// this process (its device pointers are ours). A pid alone is not enough across PID
// namespaces that share a network namespace.
const std::string& process_token() {
  static const std::string t = [] {
    uint64_t v = 0;
    FILE* f = std::fopen("/dev/urandom", "rb");
    if (!f || std::fread(&v, sizeof v, 1, f) != 1) v = static_cast<uint64_t>(getpid()) * 0x9e3779b97f4a7c15ull ^ reinterpret_cast<uintptr_t>(&v);
    if (f) std::fclose(f);
    return std::to_string(v);
  }();
  return t;
}

// "cuda_ipc1:<inner>:<token>:<inner offer or answer>" -> token and the inner text.
bool split_wire(const std::string& text, const std::string& inner, std::string* token, std::string* rest) {
  const std::string head = "cuda_ipc1:" + inner + ":";
  if (text.compare(0, head.size(), head) != 0) return false;
  const size_t colon = text.find(':', head.size());
  if (colon == std::string::npos) return false;
  *token = text.substr(head.size(), colon - head.size());
  *rest = text.substr(colon + 1);
  return true;
}

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
          std::string inner_name)
      : inner_t_(std::move(inner_t)), inner_(inner), peer_(peer), m_(m), inner_name_(std::move(inner_name)) {}
  std::string offer() override { return "cuda_ipc1:" + inner_name_ + ":" + process_token() + ":" + inner_->offer(); }
  Result<Endpoint*> finish(const std::string& answer, const std::vector<int>& fds) override {
    std::string token, inner_answer;
    if (!split_wire(answer, inner_name_, &token, &inner_answer)) {
      for (int fd : fds) ::close(fd);
      return Status(Code::kRemoteError, "cuda_ipc: " + peer_.describe() + " answered an unknown offer", peer_.peer_rank);
    }
    auto ep = inner_->finish(inner_answer, fds);
    if (!ep.ok()) return ep.status();
    return static_cast<Endpoint*>(new cuda_ipc::CudaIpcEndpoint(std::move(inner_t_), std::unique_ptr<Endpoint>(ep.value()),
                                                                peer_, m_, token == process_token()));
  }

 private:
  std::unique_ptr<Transport> inner_t_;
  std::unique_ptr<PendingConnect> inner_;
  PeerContext peer_;
  const CudaModule* m_;
  std::string inner_name_;
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
    return static_cast<PendingConnect*>(new Pending(std::move(t), c.value(), peer, cuda_module(nullptr), e->name));
  }
  Result<Endpoint*> accept(const PeerContext& peer, const std::string& offer, std::string* answer,
                           const std::vector<int>& fds) override {
    std::string why;
    if (!cuda_ipc_usable(&why)) return NotSupported("cuda_ipc: " + why);
    const TransportEntry* e = inner_entry();
    std::string token, inner_offer;
    if (!e || !split_wire(offer, e->name, &token, &inner_offer))
      return NotSupported("cuda_ipc: the peer runs over another host transport");
    auto t = e->make();
    std::string inner_answer;
    auto ep = t->accept(peer, inner_offer, &inner_answer, fds);
    if (!ep.ok()) return ep.status();
    *answer = prefix(e) + process_token() + ":" + inner_answer;
    return static_cast<Endpoint*>(new cuda_ipc::CudaIpcEndpoint(std::move(t), std::unique_ptr<Endpoint>(ep.value()), peer,
                                                               cuda_module(nullptr), token == process_token()));
  }

 private:
  static std::string prefix(const TransportEntry* e) { return "cuda_ipc1:" + e->name + ":"; }
  mutable std::unique_ptr<Transport> probe_;
};

}  // namespace

std::unique_ptr<Transport> make_cuda_ipc_transport() { return std::make_unique<CudaIpcTransport>(); }

}  // namespace uccl
