#include "transports/verbs/verbs_channel.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>

namespace uccl {
namespace {

Status verbs_error(const VerbsDevice& d, const std::string& what, int err) {
  return Status(Code::kSystemError, "verbs " + d.name() + ": " + what + " failed: " + std::strerror(err ? err : EIO));
}

}  // namespace

Result<std::unique_ptr<VerbsChannel>> VerbsChannel::create(std::shared_ptr<VerbsDevice> dev, int nqp, size_t lane) {
  std::unique_ptr<VerbsChannel> ch(new VerbsChannel());
  ch->dev_ = dev;
  ch->lane_ = lane;
  const bool ctrl = lane == 0;
  const size_t area_bytes = ctrl ? kAreaBytes : 4096;  // a data lane needs no control buffers
  ch->api_ = dev->api();
  const IbvApi* api = ch->api_;
  if (nqp < 1) nqp = 1;
  if (nqp > 16) nqp = 16;

  ch->area_ = static_cast<char*>(std::aligned_alloc(4096, area_bytes));
  if (!ch->area_) return Status(Code::kSystemError, "verbs: out of memory for the control area");
  std::memset(ch->area_, 0, area_bytes);
  ch->mr_ = api->reg_mr(dev->pd(), ch->area_, area_bytes,
                        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!ch->mr_) return verbs_error(*dev, "ibv_reg_mr (control area)", errno);

  int cqe = nqp * (kMaxSendWr + static_cast<int>(kDataWqes)) + static_cast<int>(kCtrlSlots) + 16;
  ch->cq_ = api->create_cq(dev->context(), cqe, nullptr, nullptr, 0);
  if (!ch->cq_) return verbs_error(*dev, "ibv_create_cq", errno);

  std::random_device rd;
  for (int i = 0; i < nqp; ++i) {
    ibv_qp_init_attr qa{};
    qa.send_cq = ch->cq_;
    qa.recv_cq = ch->cq_;
    qa.qp_type = IBV_QPT_RC;
    qa.sq_sig_all = 0;
    qa.cap.max_send_wr = kMaxSendWr;
    qa.cap.max_recv_wr = i == 0 && ctrl ? kCtrlSlots : kDataWqes;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    ibv_qp* qp = api->create_qp(dev->pd(), &qa);
    if (!qp) return verbs_error(*dev, "ibv_create_qp", errno);
    ch->qps_.push_back(qp);
    ch->psn_.push_back(rd() & 0xffffff);

    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = static_cast<uint8_t>(dev->port().nic.port);
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    int rc = api->modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (rc) return verbs_error(*dev, "ibv_modify_qp(INIT)", rc);
  }
  if (ctrl)
    for (uint32_t s = 0; s < kCtrlSlots; ++s) UCCL_RETURN_IF_ERROR(ch->post_ctrl_recv(s));
  for (int q = ctrl ? 1 : 0; q < nqp; ++q)
    for (uint32_t k = 0; k < kDataWqes; ++k) UCCL_RETURN_IF_ERROR(ch->post_data_recv(q));
  return ch;
}

VerbsChannel::~VerbsChannel() {
  for (ibv_qp* qp : qps_) api_->destroy_qp(qp);
  if (cq_) api_->destroy_cq(cq_);
  if (mr_) api_->dereg_mr(mr_);
  std::free(area_);
}

VerbsConnInfo VerbsChannel::local_info() const {
  const PortInfo& p = dev_->port();
  VerbsConnInfo c;
  c.device = p.nic.name;
  c.link_layer = p.nic.link_layer;
  c.lid = p.lid;
  std::memcpy(c.gid, p.gid.raw, 16);
  c.gid_index = p.gid_index;
  c.mtu = static_cast<int>(p.active_mtu);
  for (size_t i = 0; i < qps_.size(); ++i) {
    c.qpn.push_back(qps_[i]->qp_num);
    c.psn.push_back(psn_[i]);
  }
  c.mbox_addr = reinterpret_cast<uint64_t>(area_);
  c.mbox_rkey = mr_->rkey;
  c.ctrl_slots = kCtrlSlots;
  c.ctrl_slot_bytes = kCtrlSlotBytes;
  c.gbps = p.nic.gbps;
  c.fabric = p.nic.fabric;
  c.adaptive_writer = true;  // this build honours kFlagAdaptive
  return c;
}

void VerbsChannel::trim(size_t nqp) {
  while (qps_.size() > nqp && qps_.size() > 1) {
    api_->destroy_qp(qps_.back());
    qps_.pop_back();
    psn_.pop_back();
  }
}

Status VerbsChannel::connect(const VerbsConnInfo& remote, const VerbsOptions& o) {
  const PortInfo& p = dev_->port();
  if ((remote.link_layer == "roce") != p.is_roce)
    return Status(Code::kNotSupported, "verbs " + p.nic.name + " (" + p.nic.link_layer + ") cannot reach peer port " +
                                           remote.device + " (" + remote.link_layer + ")");
  if (remote.qpn.size() < qps_.size()) return Internal("verbs: peer has fewer QPs than negotiated");
  path_mtu_ = static_cast<ibv_mtu>(std::min(static_cast<int>(p.active_mtu), remote.mtu));
  // GRH: always on RoCE; on IB only if a GID index was requested (routed IB subnets).
  bool grh = p.is_roce || (o.gid_index >= 0 && remote.gid_index >= 0);
  for (size_t i = 0; i < qps_.size(); ++i) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = path_mtu_;
    a.dest_qp_num = remote.qpn[i];
    a.rq_psn = remote.psn[i];
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;  // 0.64 ms; credits make RNR a should-not-happen
    a.ah_attr.port_num = static_cast<uint8_t>(p.nic.port);
    a.ah_attr.sl = static_cast<uint8_t>(o.sl);
    if (grh) {
      a.ah_attr.is_global = 1;
      std::memcpy(a.ah_attr.grh.dgid.raw, remote.gid, 16);
      a.ah_attr.grh.sgid_index = static_cast<uint8_t>(p.gid_index >= 0 ? p.gid_index : 0);
      a.ah_attr.grh.hop_limit = 255;
      a.ah_attr.grh.traffic_class = static_cast<uint8_t>(o.tc);
    } else {
      a.ah_attr.dlid = static_cast<uint16_t>(remote.lid);
    }
    int rc = api_->modify_qp(qps_[i], &a,
                             IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc) return verbs_error(*dev_, "ibv_modify_qp(RTR) to " + remote.device, rc);

    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = static_cast<uint8_t>(o.timeout);
    a.retry_cnt = static_cast<uint8_t>(o.retry_cnt);
    a.rnr_retry = 7;
    a.sq_psn = psn_[i];
    a.max_rd_atomic = 1;
    rc = api_->modify_qp(qps_[i], &a,
                         IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                             IBV_QP_MAX_QP_RD_ATOMIC);
    if (rc) return verbs_error(*dev_, "ibv_modify_qp(RTS)", rc);
  }
  return Status::Ok();
}

void VerbsChannel::to_error() {
  for (ibv_qp* qp : qps_) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    api_->modify_qp(qp, &a, IBV_QP_STATE);
  }
}

Status VerbsChannel::post_ctrl_recv(uint32_t slot) {
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uint64_t>(recv_slot(slot));
  sge.length = kCtrlSlotBytes;
  sge.lkey = mr_->lkey;
  ibv_recv_wr wr{};
  wr.wr_id = make_wr_id(WrKind::kCtrlRecv, 0, slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  int rc = ibv_post_recv(qps_[0], &wr, &bad);
  if (rc) return verbs_error(*dev_, "ibv_post_recv", rc);
  return Status::Ok();
}

Status VerbsChannel::post_data_recv(size_t qp) {
  ibv_recv_wr wr{};
  wr.wr_id = make_wr_id(WrKind::kDataRecv, wr_qp_field(lane_, qp), 0);
  wr.sg_list = nullptr;
  wr.num_sge = 0;  // a write with immediate places no bytes in the receive buffer
  ibv_recv_wr* bad = nullptr;
  int rc = ibv_post_recv(qps_[qp], &wr, &bad);
  if (rc) return verbs_error(*dev_, "ibv_post_recv (data)", rc);
  return Status::Ok();
}

}  // namespace uccl
