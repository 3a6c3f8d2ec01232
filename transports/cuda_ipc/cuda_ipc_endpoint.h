// The cuda_ipc endpoint: the per-message protocol of cuda_ipc_transport.h over an inner host
// endpoint. Not thread safe (the engine lock serialises it, like every endpoint).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "base/device.h"
#include "cuda/cuda_module.h"
#include "transports/cuda_ipc/pinned_pool.h"
#include "transports/transport.h"

namespace uccl {
namespace cuda_ipc {

enum CtrlType : uint8_t { kIpc = 1, kInline = 2, kAck = 3 };

// One control record; every control message on the inner endpoint is exactly this size.
struct Ctrl {
  uint32_t magic = 0x43495043;  // "CIPC"
  uint8_t type = 0;
  uint8_t direct = 0;           // kIpc between threads of one process: offset is the address
  uint8_t pad[2] = {0, 0};
  uint64_t bytes = 0;
  Envelope env;                 // the user's envelope, checked here (the inner one is fixed)
  CudaIpcExport x;              // kIpc: the sender's allocation
  char pci[24] = {0};           // kIpc: PCI bus id of the allocation's device
};
static_assert(sizeof(Ctrl) == 168, "Ctrl travels on the wire");

class CudaIpcEndpoint final : public Endpoint {
 public:
  // inner_transport: the transport that made `inner` (kept alive as long as its endpoint).
  CudaIpcEndpoint(std::unique_ptr<Transport> inner_transport, std::unique_ptr<Endpoint> inner,
                  const PeerContext& peer, const CudaModule* mod, bool same_process);
  ~CudaIpcEndpoint() override;

  void post_send(SendRequest* r) override;
  void post_recv(RecvRequest* r) override;
  bool progress() override;
  int wait_fd() const override { return inner_->wait_fd(); }
  void arm_wait(WaitSet* ws) override;
  void disarm_wait() override { inner_->disarm_wait(); }
  bool has_pending() const override;
  void fail_all(const Status& why) override;
  bool farewell_delivered() const override { return inner_->farewell_delivered(); }  // (staged_endpoint.h)
  Status peer_farewell() const override { return inner_->peer_farewell(); }
  TransportKind kind() const override;
  std::string describe() const override;

 private:
  // Device work whose completion a request waits for.
  struct DeviceWork {
    DeviceBackend* backend = nullptr;
    std::unique_ptr<DeviceEvent> event;
    void* temp = nullptr;  // device scratch to free when done (reduce of staged data)
  };
  struct SendOp {
    SendRequest* r = nullptr;
    bool posted = false, ipc = false, staging = false;
    uint64_t ack_index = 0;  // ipc: completes once acks_ > ack_index
    Ctrl ctrl;
    SendRequest ctrl_req, payload_req;
    Stage stage;
    DeviceWork work;
  };
  struct Arrived {  // a descriptor that came before its receive was posted
    Ctrl ctrl;
    std::unique_ptr<RecvRequest> payload;  // kInline: received into `buffer`
    Stage buffer;
  };
  struct RecvOp {
    RecvRequest* r = nullptr;
    enum State { kNeedDesc, kInnerRecv, kDevice, kDone } state = kNeedDesc;
    Ctrl ctrl;
    RecvRequest inner;                    // payload receive (into dst or stage)
    std::unique_ptr<Arrived> early;       // payload received early into an owned buffer
    Stage stage;                          // host staging for device destinations
    bool stage_pending = false;           // stage filled by inner/early: deliver it
    bool ack_after = false;               // kIpc: send the ACK once the device work is done
    DeviceWork work;
  };
  struct AckOut {
    Ctrl ctrl;
    SendRequest req;
  };

  bool pump_sends();
  bool pump_ctrl();
  bool pump_recvs();
  void start_recv(RecvOp& op);
  Status start_ipc_read(RecvOp& op);
  Status deliver_stage(RecvOp& op, const uint8_t* data);
  void send_ack();
  void post_ctrl_recv_if_needed();
  bool awaiting_ctrl() const;
  Result<DeviceStream*> stream_for(DeviceBackend* b, int ordinal);
  Result<void*> map_peer(const Ctrl& c, int ordinal);
  Result<bool> work_done(DeviceWork& w);
  void fail_everything(const Status& why);
  Envelope fixed_env() const { return Envelope{}; }
  static bool is_cuda(const MemoryLoc& l) { return l.kind == MemoryKind::kCuda && l.backend; }

  std::unique_ptr<Transport> inner_transport_;  // declared first: destroyed after inner_
  std::unique_ptr<Endpoint> inner_;
  PeerContext peer_;
  const CudaModule* mod_;
  DeviceBackend* cuda_;
  bool same_process_;
  bool failed_ = false;
  Status error_;
  PinnedPool pool_;  // before the ops: their stages go back to it

  std::deque<std::unique_ptr<SendOp>> sends_;
  std::deque<std::unique_ptr<RecvOp>> recvs_;
  std::deque<std::unique_ptr<Arrived>> arrived_;
  std::deque<std::unique_ptr<AckOut>> acks_out_;
  uint64_t acks_expected_ = 0, acks_ = 0;
  Ctrl ctrl_in_;
  RecvRequest ctrl_req_;
  bool ctrl_posted_ = false;

  std::map<std::pair<DeviceBackend*, int>, std::unique_ptr<DeviceStream>> streams_;
  std::map<std::pair<uint64_t, int>, void*> mappings_;  // (peer buffer id, my device) -> base
};

}  // namespace cuda_ipc
}  // namespace uccl
