// What crosses the wire for the verbs transport: the connection offer/answer text and the
// control message header. Both are versioned; free of verbs.h so that they are unit-tested on
// hosts without rdma-core.
//
// Control stream (QP 0, SEND into the peer's pre-posted bounce buffers, in order):
//   EAGER seq env bytes payload    a whole message of up to `eager_limit` bytes
//   RTS   seq env bytes            "I have a large message"; sent only if no CTS is known yet,
//                                  so a receiver that expected something small still answers
//   CTS   seq env bytes addr rkey  receiver: "write message seq here" (its expected envelope and
//                                  size ride along so the sender can refuse a mismatch before
//                                  writing a byte); flag REJECT: "do not send, I failed it"
//   DONE  seq env bytes            sender refuses a CTS (flag MISMATCH): nothing was written
//   READY lanes                    the active side's first message: its QPs are in RTS, so the
//                                  passive side may send (before, its packets could reach a QP
//                                  still in INIT and cost a retry timeout); `addr` is the mask
//                                  of the lanes it connected (verbs_lanes.h), 0 from a build
//                                  that does not stripe (lane 0 alone)
// The data of a rendezvous needs no control message: the last RDMA write on each QP carries
// the immediate (uint32) low 32 bits of seq; on QP 0 it consumes a control buffer (a credit).
// Which QPs deliver one (verbs_lanes.h): a CTS without flag ADAPTIVE, those of the static cut
// both sides compute (lane_pieces); with ADAPTIVE (only sent to a peer whose offer/answer says
// "astripe=1"), every QP of the connection, each closed by a write with immediate after the
// message's last chunk, a zero-length one where the QP's last chunk carried none.
// An EAGER with flag INVALID tells the receiver the sender's request was bad (no payload).
// Every message carries `credits`: the cumulative number of control buffers its sender has
// reposted, so credits flow back for free whenever traffic goes both ways; otherwise the
// receiver RDMA-writes the same counter into the sender's mailbox.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "uccl/status.h"
#include "transports/transport.h"

namespace uccl {

constexpr uint32_t kVerbsWireVersion = 1;
constexpr uint32_t kCtrlMagic = 0x55435642;  // "UCVB"

enum class CtrlType : uint8_t { kEager = 1, kRts = 2, kCts = 3, kDone = 4, kReady = 5 };
enum CtrlFlag : uint8_t {
  kFlagMismatch = 1,  // DONE: the sender found the CTS did not match; no data was written
  kFlagReject = 2,    // CTS: the receiver failed this message; the sender must not write
  kFlagInvalid = 4,   // EAGER: the sender's request was invalid; CTS (with REJECT): the receive was
  kFlagAdaptive = 8,  // CTS: stripe adaptively over the lanes, close every QP with an immediate
};

struct CtrlMsg {
  uint32_t magic = kCtrlMagic;
  uint8_t type = 0;
  uint8_t flags = 0;
  uint16_t reserved = 0;
  uint64_t seq = 0;      // message number in this direction (0, 1, 2, ...)
  uint64_t bytes = 0;    // sender: size of the message; CTS: the size the receiver expects
  uint64_t addr = 0;     // CTS: where to write; READY: the mask of connected lanes
  uint32_t rkey = 0;     // CTS: the key of lane 0's port
  uint32_t reserved2 = 0;
  uint64_t credits = 0;  // cumulative control buffers reposted by the writer of this message
  Envelope env;          // sender: its envelope; CTS: the receiver's expected envelope
  uint32_t lane_rkey[7] = {};  // CTS: the keys of lanes 1..7 (each lane's port has its own PD)
  uint8_t pad[20] = {};
};
static_assert(sizeof(CtrlMsg) == 128, "CtrlMsg is part of the wire protocol; payload starts 64-aligned");

// Connection parameters of one side (the offer or the answer).
struct VerbsConnInfo {
  uint32_t version = kVerbsWireVersion;
  std::string device;        // "rxe0:1" (for messages)
  std::string link_layer;    // "ib" | "roce"
  uint32_t lid = 0;
  uint8_t gid[16] = {};
  int gid_index = -1;
  int mtu = 3;               // ibv_mtu enum value of the active MTU
  std::vector<uint32_t> qpn;
  std::vector<uint32_t> psn;
  uint64_t mbox_addr = 0;    // the credit mailbox (8 bytes, remote writable)
  uint32_t mbox_rkey = 0;
  uint32_t ctrl_slots = 0;   // control buffers pre-posted on QP 0
  uint32_t ctrl_slot_bytes = 0;  // each = sizeof(CtrlMsg) + eager payload limit
  double gbps = 0;           // the port's rated speed (0 unknown): lanes are weighted by it
  std::string fabric;        // "roce:10.77.0.0/24": lanes pair ports on one fabric
  // "astripe=1": this side honours a CTS with kFlagAdaptive (verbs_lanes.h). Optional on the
  // wire: a peer without it is only sent static CTSs, so older builds still interoperate.
  bool adaptive_writer = false;

  // Striping over several ports (verbs_lanes.h): the fields above describe lane 0; each entry
  // here one more lane: in an offer the active side's lane `index` (1, 2, ...), in an answer the
  // passive side's port for the offered lane `index`. Only the port and QP fields are used.
  // Optional on the wire ("lane<index>=dev|ll|lid|gid|gidx|mtu|gbps|fabric|qpn,..|psn,.."): a
  // peer that does not stripe ignores them and answers for lane 0 alone.
  struct Lane {
    uint32_t index = 0;
    std::shared_ptr<VerbsConnInfo> info;
  };
  std::vector<Lane> lanes;

  // "uccl-verbs v=1 dev=rxe0:1 ll=roce lid=0 gid=<32 hex> gidx=1 mtu=3 qpn=17,18 psn=..,.. ..."
  std::string serialize() const;
  static Result<VerbsConnInfo> parse(const std::string& text);
};

}  // namespace uccl
