// The hardware resources of one verbs connection: RC QPs, one CQ, the registered control area.
//
// Why one CQ for all QPs of a connection (send and receive): progress() drains a single queue,
// no thread per QP, and the order of completions of one QP is preserved in it.
// Why QP 0 is special: it carries the ordered control stream and owns the pre-posted receive
// buffers; the other QPs carry only RDMA writes, whose last piece per message is a write with
// immediate that consumes one of their zero-length receives (kDataWqes each).
//
// Life cycle: create() makes the QPs in INIT and posts the control receives (legal in INIT),
// so the peer can send as soon as we move to RTR; connect() moves every QP to RTR then RTS with
// the peer's numbers. On failure to_error() moves every QP to ERR: the HCA then drops incoming
// writes at once, so a failed receive buffer is never written behind the caller's back.
#pragma once

#include <infiniband/verbs.h>

#include <memory>
#include <vector>

#include "uccl/status.h"
#include "transports/verbs/verbs_device.h"
#include "transports/verbs/verbs_wire.h"

namespace uccl {

constexpr uint32_t kCtrlSlots = 64;        // control receive buffers per connection (credits)
constexpr uint32_t kCtrlSendSlots = 64;    // control send buffers per connection
constexpr uint32_t kEagerLimit = 8192;     // payload bytes carried inside a control message
constexpr uint32_t kCtrlSlotBytes = sizeof(CtrlMsg) + kEagerLimit;
constexpr int kMaxSendWr = 256;            // send queue depth per QP
constexpr uint32_t kDataWqes = 128;        // zero-length receives on QPs 1.. (for write-with-imm)

// Work request ids: what completed, on which QP, and which slot / message it belongs to.
enum class WrKind : uint8_t { kCtrlRecv = 1, kCtrlSend = 2, kData = 3, kMailbox = 4, kDataRecv = 5 };
// The 8-bit QP field names the lane and the QP inside it (lane * 32 + qp; verbs_lanes.h caps
// lanes at 8, and a channel has at most 16 QPs).
inline size_t wr_qp_field(size_t lane, size_t qp) { return lane * 32 + qp; }
inline uint64_t make_wr_id(WrKind kind, size_t qp, uint64_t index) {
  return (uint64_t(kind) << 56) | (uint64_t(qp & 0xff) << 48) | (index & ((uint64_t(1) << 48) - 1));
}
inline WrKind wr_kind(uint64_t id) { return static_cast<WrKind>(id >> 56); }
inline size_t wr_qp(uint64_t id) { return (id >> 48) & 0xff; }
inline uint64_t wr_index(uint64_t id) { return id & ((uint64_t(1) << 48) - 1); }

class VerbsChannel {
 public:
  // `lane`: the connection's lane this channel is (verbs_lanes.h); lanes after the first carry
  // only RDMA writes, so all their QPs get zero-length receives and no control buffers.
  static Result<std::unique_ptr<VerbsChannel>> create(std::shared_ptr<VerbsDevice> dev, int nqp, size_t lane = 0);
  ~VerbsChannel();

  VerbsConnInfo local_info() const;
  // Uses the first `nqp` QPs (the passive side may have offered fewer); extras are destroyed.
  void trim(size_t nqp);
  Status connect(const VerbsConnInfo& remote, const VerbsOptions& options);
  void to_error();

  Status post_ctrl_recv(uint32_t slot);
  Status post_data_recv(size_t qp);  // a zero-length receive on a data QP (>= 1 on lane 0)
  size_t lane() const { return lane_; }
  char* recv_slot(uint32_t i) const { return area_ + kRecvOffset + size_t(i) * kCtrlSlotBytes; }
  char* send_slot(uint32_t i) const { return area_ + kSendOffset + size_t(i) * kCtrlSlotBytes; }
  // The peer RDMA-writes its credit counter here; we write ours to the peer from mbox_src().
  volatile uint64_t* mbox() const { return reinterpret_cast<volatile uint64_t*>(area_); }
  uint64_t* mbox_src() const { return reinterpret_cast<uint64_t*>(area_ + 64); }
  uint32_t lkey() const { return mr_->lkey; }

  VerbsDevice& device() const { return *dev_; }
  const std::shared_ptr<VerbsDevice>& device_ptr() const { return dev_; }
  ibv_cq* cq() const { return cq_; }
  ibv_qp* qp(size_t i) const { return qps_[i]; }
  size_t nqp() const { return qps_.size(); }
  ibv_mtu path_mtu() const { return path_mtu_; }

 private:
  static constexpr size_t kRecvOffset = 4096;  // first page: mailbox
  static constexpr size_t kSendOffset = kRecvOffset + size_t(kCtrlSlots) * kCtrlSlotBytes;
  static constexpr size_t kAreaBytes = kSendOffset + size_t(kCtrlSendSlots) * kCtrlSlotBytes;

  VerbsChannel() = default;
  std::shared_ptr<VerbsDevice> dev_;
  size_t lane_ = 0;
  const IbvApi* api_ = nullptr;
  ibv_cq* cq_ = nullptr;
  std::vector<ibv_qp*> qps_;
  std::vector<uint32_t> psn_;
  char* area_ = nullptr;
  ibv_mr* mr_ = nullptr;
  ibv_mtu path_mtu_ = IBV_MTU_1024;
};

}  // namespace uccl
