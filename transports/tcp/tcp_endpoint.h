// TcpEndpoint: the non-blocking data path of the tcp transport (internal header).
//
// Wire: every message travels as 1..N parts; each part is a PartHeader followed by its bytes.
// The header carries the message's sequence number (per direction), so the receiver maps a
// part to the posted request without any agreement on how the sender split the message:
// striping policy (UCCL_TCP_STRIPE_MIN_BYTES) may even differ between the two processes.
// Small messages go whole on socket (seq % nsocks). Large ones (UCCL_TCP_STRIPE_MIN_BYTES)
// are striped over the sockets:
//  * adaptive (UCCL_TCP_STRIPE, the default): cut into chunks (UCCL_TCP_STRIPE_CHUNK_BYTES),
//    each handed to the socket with the fewest bytes still on their way, queued here or in its
//    kernel buffer, unsent or unacknowledged (SIOCOUTQ), once that is below the socket's limit
//    (least_committed_lane, transports/stripe.h). A socket over a NIC that is slower than it
//    reports, or busy with other traffic, drains slower and so gets fewer chunks: measured
//    rates come for free, chunk by chunk. The limit is two bandwidth-delay products of the
//    socket's own path (TCP_INFO delivery rate x minimum RTT), at least
//    UCCL_TCP_STRIPE_INFLIGHT_BYTES, so a long fat link stays full while a short one commits
//    little ahead (what a lane holds when the message ends is what the slowest one adds).
//    Parts wait in feedq_ in message order, and a later message's parts (small ones too) queue
//    behind them: each socket's stream stays in message order, so a socket stalled on a
//    message whose receive is not posted never holds back a part of an earlier one.
//  * static: nsocks parts aligned to 4096 bytes, part i on socket (seq + i) % nsocks, sized by
//    the lanes' reported rates where the core spread the sockets over several networks
//    (PeerContext::lane_gbps; weighted_parts, the helper verbs stripes over HCA ports with too).
//
// Receiving: each socket has a small staging buffer; headers and small payloads arrive there
// in one recv (many small messages per syscall). Large plain payloads are read straight into
// the destination, with the staging buffer as a second iovec to catch the next header.
// Reduce receives go through a cache-resident, per-thread bounce buffer and are reduced into
// dst chunk by chunk (a partial element at a chunk edge is carried to the next chunk).
// A part whose request is not posted yet stalls its socket: no more reading (the kernel
// buffer is the backpressure) and EPOLLIN is masked so that an idle engine does not spin.
//
// Completion is in post order per direction even when parts finish out of order.
//
// wait_fd() is an epoll fd over the sockets; poll() it for POLLIN. It turns readable when a
// socket has bytes that progress() can consume (EPOLLIN, masked while the socket is stalled),
// when a send that hit a full kernel buffer can continue (EPOLLOUT, registered only while
// blocked, so small sends cost no epoll_ctl), or on error/hang-up. A freshly posted request
// is not visible to it: the engine calls progress() after posting and sleeps only once
// progress() returned false. After a fatal error the sockets leave the epoll set, so a dead
// endpoint never keeps the engine awake.
//
// Failure: peer close / reset, garbage, and envelope or size mismatches are fatal for the
// endpoint (the stream cannot be resynchronized): every pending request fails with the reason,
// later posts fail at once, and the sockets are shut down so the peer learns immediately; an
// abort frame in front of the shutdown tells the peer why (see kPartAbort).
// A peer that failed or closed still has everything it sent before delivered: an abort frame,
// an end of stream or a hang-up ends that one socket's stream (the data in front of it was
// read, or is still in the kernel for a stalled socket), and the endpoint fails only once a
// pending request can no longer complete (check_peer_gone). So an operation that the failing
// peer had completed (it sent all its part) never fails on this side afterwards.
//
// Encrypted links (tcp_tls.h): each socket has a TlsLink whose handshake progress() drives
// first (requests posted meanwhile wait); then every byte goes through io_*(): plain syscalls
// where the kernel encrypts (kTLS) or there is no TLS, SSL_read/SSL_write otherwise. Bytes
// OpenSSL decrypted but we did not read yet are invisible to epoll: progress() reads a socket
// whose TlsLink has pending bytes as if it were readable.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "base/config.h"
#include "base/net.h"
#include "transports/stripe.h"
#include "transports/tcp/tcp_tls.h"
#include "transports/transport.h"

namespace uccl {

// UCCL_TCP_STRIPE_MIN_BYTES, UCCL_TCP_STRIPE, UCCL_TCP_STRIPE_CHUNK_BYTES,
// UCCL_TCP_STRIPE_INFLIGHT_BYTES (declared in tcp_endpoint.cc).
extern const BytesSetting kTcpStripeMinBytes;
extern const TextSetting kTcpStripe;
extern const BytesSetting kTcpStripeChunkBytes;
extern const BytesSetting kTcpStripeInflightBytes;
namespace tcp {

constexpr uint32_t kPartMagic = 0x31544355;  // "UCT1" as little-endian bytes
constexpr size_t kStageBytes = 8192;        // per socket: headers and small payloads
constexpr size_t kBounceBytes = 256 << 10;  // per thread: reduce receives (fits in L2)

// The last frame of a failing endpoint: a header with this flag and the root cause as payload
// (at most kMaxCloseNoteBytes). It is written only at a part boundary, right before the socket
// is shut down, so a receiver that finds the peer gone reads through what is left in the
// stream (skipping parts nobody will receive any more) to find it.
constexpr uint16_t kPartAbort = 1;

// 72 bytes in front of every part; host byte order (all supported hosts are little-endian).
struct PartHeader {
  uint32_t magic = kPartMagic;
  uint16_t flags = 0;         // 0, or kPartAbort
  uint16_t part_count = 1;    // parts of this message (all carry the same value)
  uint64_t msg_seq = 0;       // message number in this direction, from 0
  Envelope env;
  uint64_t total_bytes = 0;   // message size
  uint64_t part_offset = 0;   // where this part goes inside the message
  uint64_t part_bytes = 0;
};
static_assert(sizeof(PartHeader) == 72, "wire layout");

class TcpEndpoint final : public Endpoint {
 public:
  // Takes ownership of fds (closes them on failure). tls: encrypt every socket (TLS 1.3 with
  // PSK peer.link_key); server: this side accepted the connection (TLS server role).
  static Result<Endpoint*> create(const PeerContext& peer, const std::vector<int>& fds, bool tls = false,
                                  bool server = false);
  ~TcpEndpoint() override;

  void post_send(SendRequest* r) override;
  void post_recv(RecvRequest* r) override;
  bool progress() override;
  int wait_fd() const override { return epfd_; }
  // The sockets' epoll fd; while striped chunks wait for a socket to drain (nothing signals
  // that), the sleep is kept short (poll_only).
  void arm_wait(WaitSet* ws) override;
  bool has_pending() const override { return !sends_.empty() || !recvs_.empty(); }
  // The first part of the next unclaimed message to arrive stalls its socket (no receive is
  // posted for it): its header names the message.
  Result<bool> peek(Envelope* env, size_t* bytes) override;
  void fail_all(const Status& why) override { fatal(why); }
  bool farewell_delivered() const override;  // every socket's output acknowledged (SIOCOUTQ 0)
  TransportKind kind() const override { return TransportKind::kTcp; }
  std::string describe() const override;

 private:
  struct SendOp {
    SendRequest* req;
    uint32_t parts_left;
  };
  struct RecvOp {
    RecvRequest* req;
    uint64_t bytes_done = 0;
    uint32_t parts_done = 0;
    uint32_t part_count = 0;  // 0 until the first part's header arrives
  };
  struct TxPart {
    SendOp* op;
    PartHeader hdr;
    const uint8_t* data;
    size_t done;  // bytes of header + payload written
    int socket;   // in feedq_: the socket it must go to, or -1 for the least committed one
  };
  struct Socket {
    int fd = -1;
    int index = 0;
    uint32_t epoll_mask = 0;  // events currently registered; 0 and !in_epoll after eof
    bool in_epoll = false;
    bool readable = false, writable = false;  // from the last epoll_wait
    // send side
    std::deque<TxPart> txq;
    bool tx_blocked = false;  // last write hit a full buffer: wait for EPOLLOUT
    // receive side
    std::unique_ptr<uint8_t[]> stage;
    size_t stage_begin = 0, stage_end = 0;
    bool have_hdr = false;
    bool stalled = false;  // have_hdr, but the matching receive is not posted yet
    bool eof = false;      // its stream ended cleanly (end of stream or abort frame)
    bool hup = false;      // hung up while stalled: out of epoll, read to its end once matched
    PartHeader hdr;
    RecvOp* op = nullptr;  // request of the current part (nullptr until matched)
    uint64_t part_done = 0;
    uint8_t carry[16];     // partial element between reduce chunks
    size_t carry_len = 0;
    std::unique_ptr<TlsLink> tls;  // encrypted link, or null
    bool tls_ready = true;         // handshake finished (or no TLS)
    LinkWatch watch;               // check_links(): dead links
    size_t staged() const { return stage_end - stage_begin; }
  };

  TcpEndpoint(const PeerContext& peer, int epfd, std::vector<int> fds);

  // Fails every pending request with `why`, refuses new ones and shuts the sockets down so the
  // peer learns at once instead of waiting for its own timeout; with an abort frame that tells
  // it why, unless the endpoint is only being destroyed (that is no failure of this rank).
  void fatal(const Status& why, bool send_abort_frame = true);
  void send_abort_frames(const std::string& why);
  bool finish_part_in_flight(Socket& s, double deadline);
  static constexpr double kAbortFrameBudgetSeconds = 0.05;  // per endpoint, for parts in flight
  // The peer is gone: its error, with the root cause from its abort frame when it left one.
  Status peer_gone(const std::string& detail);
  bool find_abort_note(Socket& s, std::string* note);
  Status garbage(const Socket& s, const std::string& what) const;
  void update_epoll(Socket& s);
  void poll_readiness();
  // TLS: advances the sockets' handshakes; handshaking_ turns false once all finished.
  bool drive_handshakes();
  // Socket I/O through TLS where there is user-space TLS, else plain syscalls (MSG_DONTWAIT).
  ssize_t io_sendmsg(Socket& s, const iovec* iov, int niov);
  ssize_t io_recv(Socket& s, void* buf, size_t n);
  ssize_t io_readv(Socket& s, const iovec* iov, int niov);
  static bool tls_pending(const Socket& s) { return s.tls && !s.tls->kernel_recv() && s.tls->pending(); }

  // tcp_endpoint_send.cc
  void queue_part(const TxPart& p);  // on its socket, or behind feedq_ while that is not empty
  bool feed();                       // hands parts from feedq_ to sockets (see "adaptive" above)
  size_t committed(const Socket& s) const;  // bytes queued on s or in its kernel buffer
  size_t inflight_limit(const Socket& s) const;
  bool send_on(Socket& s);
  bool complete_sends();
  // Dead links: a socket whose data in flight, or keepalive probes when idle, got no answer from
  // the peer's host for UCCL_TCP_DEAD_LINK_S fails the endpoint, naming the socket's lane
  // (LinkWatch, base/net.h). Looked at every LinkWatch::kLookS while a request is pending.
  void check_links();
  std::string lane_of(const Socket& s) const;  // " (network 10.211.1.0/24)" when striped, else ""
  static constexpr int kLinkCheckEvery = 64;

  // tcp_endpoint_recv.cc
  bool recv_on(Socket& s);
  Status parse_header(Socket& s);
  Status match(Socket& s);  // sets s.op or s.stalled
  void deliver(Socket& s, const uint8_t* src, size_t n);
  void reduce_chunk(Socket& s, const uint8_t* src, size_t n);
  Status finish_part(Socket& s);
  Status on_eof(Socket& s);
  void on_abort_frame(Socket& s);
  void end_stream(Socket& s);
  bool complete_recvs();
  void check_peer_gone();

  PeerContext peer_;
  std::string peer_address_;
  int epfd_ = -1;
  std::vector<Socket> socks_;
  size_t stripe_min_;
  std::vector<double> weights_;  // per socket, from the lanes' rates; empty when all are equal
  bool adaptive_;                // UCCL_TCP_STRIPE=adaptive
  size_t chunk_bytes_, inflight_min_;
  std::deque<TxPart> feedq_;     // parts not on a socket yet, in message order
  std::vector<size_t> feed_load_, feed_limit_;  // feed()'s per-socket scratch (no allocation per pass)
  double dead_link_s_;           // UCCL_TCP_DEAD_LINK_S (0: off)
  double next_link_check_ = 0;
  int link_check_calls_ = 0;
  Status dead_;  // !ok once the endpoint failed
  bool any_eof_ = false;    // a socket's stream ended or hung up: check_peer_gone() decides
  std::string abort_note_;  // the root cause from the peer's abort frame, once one was read
  std::deque<SendOp> sends_;
  uint64_t next_send_seq_ = 0;
  std::deque<RecvOp> recvs_;
  uint64_t recv_base_seq_ = 0;  // sequence number of recvs_.front()
  bool handshaking_ = false;     // TLS handshakes in progress
  double handshake_deadline_ = 0;
};

}  // namespace tcp
}  // namespace uccl
