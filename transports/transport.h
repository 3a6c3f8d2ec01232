// The transport contract: how bytes move between two ranks.
//
// Every transport (tcp, shm, verbs) implements Endpoint the same way:
//  * post_send / post_recv never block. They queue a request that the caller owns and keeps
//    alive until it is no longer pending.
//  * progress() never blocks either: it moves as many bytes as it can right now and returns.
//    "It will be called again" (NCCL's net plugin wording): the engine calls it in a loop,
//    from whichever thread is driving the communicator.
//  * Requests of one direction complete in the order they were posted (FIFO per peer and
//    direction). Algorithms rely on this instead of tag matching: both sides post in the same
//    order, and the Envelope carried with every message checks that they really did.
//  * On a fatal error (peer closed, protocol violation) every pending request fails with a
//    Status naming the peer, and later posts fail at once. An endpoint never hangs a request
//    silently: a dead peer is detected by the transport (socket HUP, liveness socket for shm).
//
// Endpoints are not thread safe: the communicator's engine lock serializes all calls.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "uccl/status.h"
#include "uccl/types.h"
#include "uccl/work.h"

namespace uccl {

// A transport's id on the wire (the handshake names the transport by it) and in OpStats.
// These are the ids of the transports in this tree; a new transport takes a free number below
// kMaxTransports (uccl/work.h) in its registration (transports/registry.h) and needs no name here.
enum class TransportKind : uint8_t { kTcp = 0, kShm = 1, kVerbs = 2 };
// The registered transport's name, or "unknown".
const char* transport_name(TransportKind k);

// Travels in front of every message. It names the operation the sender is executing so that a
// receiver that posted something else fails with a "mismatch" error that says what differed
// instead of reading garbage or hanging. 32 bytes; layout is part of the wire protocol.
struct Envelope {
  uint64_t op_seq = 0;  // per-communicator operation number (both sides count the same way)
  uint64_t count = 0;   // element count argument of the collective
  int32_t root = -1;    // root argument (-1 if none)
  uint32_t step = 0;    // message index inside the operation (per peer and direction)
  uint8_t coll = 0;     // Collective enum value
  uint8_t dtype = 0;    // DataType
  uint8_t redop = 0;    // RedOp
  // Algorithm (uccl/types.h) the sender's schedule runs; kAuto (0) for p2p. Every rank must
  // choose alike (select.h); one that did not (a setting that differs between ranks) would
  // otherwise take a message of another algorithm whose size happens to match as its own.
  uint8_t algo = 0;
  uint8_t mark = 0;     // transport-private: a transport's own kind of message (shm alt_mark, staged slot notes)
  uint8_t pad[3] = {0, 0, 0};

  bool same_call(const Envelope& o) const {
    return op_seq == o.op_seq && count == o.count && root == o.root && coll == o.coll &&
           dtype == o.dtype && redop == o.redop && algo == o.algo;
  }
};
static_assert(sizeof(Envelope) == 32, "Envelope is part of the wire protocol");

enum class ReqState : int { kPending = 0, kDone = 1, kFailed = 2 };

struct Request {
  volatile ReqState state = ReqState::kPending;  // written only under the engine lock
  Status error;                                  // set when state == kFailed
  bool pending() const { return state == ReqState::kPending; }
};

struct RecvRequest;

struct SendRequest : Request {
  const void* data = nullptr;
  size_t bytes = 0;
  Envelope env;
  // A hint: the sender receives in the same step (a ring or exchange step), so its core has no
  // time to spare for sharing a copy. shm then lets the receiver pull even very large messages
  // in one copy (CMA) instead of splitting the work over both cores through the ring.
  bool duplex = false;
  // Where the caller also wants a local copy of the payload (all_gather's own block), or
  // nullptr. Set only for endpoints whose takes_tee() is true; the request completes after
  // the copy is made. shm copies a chunk and sends the same chunk while it is still in cache.
  void* tee = nullptr;
  // A hint: the matching receive is final (RecvRequest::final; the schedules are symmetric, so
  // the sender knows). shm then waits for that receive's offer to push a smaller message of an
  // exchange step (ShmOptions::push_min_bytes); a receive that made no offer gets the ring.
  bool to_final = false;
  // Posting ahead (Endpoint::feeds(); the executor posts a device operation's next phase with
  // the current one, core/schedule_executor.cc): the payload is the destination of `fed_by`, a
  // receive still in progress, and byte i may be read only once that receive has delivered it
  // (RecvRequest::delivered covers it, or it completed; one that failed feeds nothing, and the
  // operation fails with it). nullptr: all of it now.
  const RecvRequest* fed_by = nullptr;
  // Bytes of `data` read so far, from the start (kept current by endpoints that feed): a
  // receive posted ahead into the same bytes (RecvRequest::guard) writes only what was read.
  size_t consumed = 0;
};

// A receive either copies the incoming bytes to dst, or (reduce == true) combines them:
// dst[i] = op(acc[i], incoming[i]) with acc == nullptr meaning acc = dst. Fusing the reduction
// into the receive lets shm reduce straight out of the shared ring and tcp out of a small
// cache-resident bounce buffer: no full-size temporary, one pass over memory.
struct RecvRequest : Request {
  void* dst = nullptr;
  size_t bytes = 0;  // expected size; a different size from the sender is a mismatch error
  Envelope expect;
  bool reduce = false;
  const void* acc = nullptr;
  DataType dtype = DataType::kUint8;
  RedOp op = RedOp::kSum;
  // A hint (plain receives): the bytes are final output that this rank does not compute with
  // in the rest of the operation, so a peer writing them from its own cache beats copying them
  // out of a shared ring (all_gather, broadcast, the all-gather half of all_reduce). Where
  // the data is read right after (a direct all_reduce's slots), the ring's pieces arrive
  // cache-warm and win.
  bool final = false;
  // Ordered reduces (Action::ordered; only for endpoints whose takes_turns() is true): this
  // receive combines byte i only once `after` has delivered it, and at most `lead` bytes
  // ahead of it. The executor chains the receives of one phase that reduce into the same
  // bytes in a ring (the first is `lead` ahead of the last): they take turns over the range,
  // each piece combined from every peer while it is in cache, in the same order every run.
  const RecvRequest* after = nullptr;
  size_t lead = 0;
  size_t delivered = 0;  // bytes combined (or landed) so far: kept current by endpoints that take turns or feed
  // Posting ahead (Endpoint::feeds()): the destination overlaps the payload of `guard`, a send
  // still in progress, and a byte may be written only once that send has read it
  // (SendRequest::consumed covers it, or it is no longer pending). nullptr: no such send.
  const SendRequest* guard = nullptr;
  // An alternate form (only for endpoints whose takes_alternates() is true): a message of
  // exactly alt_bytes whose envelope carries alt_mark in its mark lands in alt_dst instead, as it
  // is (not reduced), and the endpoint sets took_alt (it clears it at post). The staged
  // endpoint's shared slots send a chunk either as its bytes or as a note naming a slot, and
  // its receiver cannot know which before the message is there.
  void* alt_dst = nullptr;
  size_t alt_bytes = 0;
  uint8_t alt_mark = 0;
  bool took_alt = false;
};

// How far a receive that takes turns may combine now: to where its `after` got, plus its lead;
// all of it without an `after`, or once that one is no longer pending.
inline size_t turn_limit(const RecvRequest& r) {
  const RecvRequest* a = r.after;
  return !a ? r.bytes : std::min(r.bytes, (a->pending() ? a->delivered : a->bytes) + r.lead);
}

// Byte counters per endpoint, read by the communicator's per-op statistics.
struct EndpointCounters {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t messages_sent = 0;
};

// What an idle driver sleeps on (see core/idle_wait.h). Before it sleeps, it asks each endpoint
// with pending requests to arm_wait(): the endpoint adds what will signal it and, for a futex,
// tells the peer that someone sleeps on it. The driver then makes one more progress pass (so
// anything the peer did before the arming is seen) and sleeps only if that moved nothing, at
// most a few milliseconds (deadlines, liveness), then disarm_wait()s under the engine lock.
struct FutexWord {
  uint32_t* addr;  // in memory shared with the peer process: a shared (not private) futex
  uint32_t value;  // what it held when armed: the sleep ends at once if it changed
};
struct WaitSet {
  std::vector<int> fds;            // poll() for POLLIN
  std::vector<FutexWord> futexes;  // woken by the peer (FUTEX_WAKE) after it bumps the word
  bool poll_only = false;          // an endpoint that can only be polled: sleep briefly
  void clear() {
    fds.clear();
    futexes.clear();
    poll_only = false;
  }
};

class Endpoint {
 public:
  virtual ~Endpoint() = default;
  // Posting makes the request pending (state = kPending) before anything else: callers re-post
  // the same request objects run after run (the tiny plan, core/schedule_tiny.cc).
  virtual void post_send(SendRequest* r) = 0;
  virtual void post_recv(RecvRequest* r) = 0;
  // Returns true if anything moved (used by the engine to decide when to back off).
  virtual bool progress() = 0;
  // An fd that turns readable/writable when progress may be possible, so an idle engine can
  // sleep in poll(); -1 if the transport must be polled by spinning (shm, verbs).
  virtual int wait_fd() const { return -1; }
  // Adds what wakes a driver sleeping for this endpoint (see WaitSet): wait_fd() by default, or
  // poll_only for an endpoint that has none. Called under the engine lock, like everything here.
  virtual void arm_wait(WaitSet* ws) {
    const int fd = wait_fd();
    if (fd >= 0) ws->fds.push_back(fd);
    else ws->poll_only = true;
  }
  virtual void disarm_wait() {}
  // A waiter spinning on `cpu` says so (shm publishes it to the peer), and asks whether the peer
  // said the same cpu: then the peer cannot run while we spin, and the waiter yields instead.
  virtual void note_waiting_on_cpu(int /*cpu*/) {}
  virtual bool peer_waits_on_cpu(int /*cpu*/) const { return false; }
  // Whether post_send() makes SendRequest::tee copies itself (else the caller copies first).
  virtual bool takes_tee() const { return false; }
  // Whether receives honour RecvRequest::after / lead and keep `delivered` current. Otherwise
  // the executor posts each ordered receive only once the one before it has completed.
  virtual bool takes_turns() const { return false; }
  // Whether receives honour RecvRequest::alt_dst (an alternate form of the message).
  virtual bool takes_alternates() const { return false; }
  // Whether device-memory requests honour SendRequest::fed_by and RecvRequest::guard and keep
  // `consumed` and `delivered` current, chunk by chunk (the staged endpoint in split mode), so
  // that the executor may post a device operation's next phase before the current one ended.
  virtual bool feeds() const { return false; }
  virtual bool has_pending() const = 0;
  // Any-source receives (P2POp::peer == kAnySource) choose their peer by the header of each
  // peer's next message. peek() makes progress and returns true with that message's envelope
  // and size once its header has arrived, consuming nothing: a receive posted afterwards gets
  // it as usual. False while nothing has arrived; the endpoint's error once it failed or its
  // peer is gone (with nothing left to deliver). Called only while no receive is pending on
  // the endpoint (the executor runs one operation at a time). Never blocks.
  // Transports that cannot look ahead answer kNotSupported.
  virtual Result<bool> peek(Envelope* /*env*/, size_t* /*bytes*/) {
    return NotSupported("this transport cannot receive from any source (no look-ahead at incoming messages)");
  }
  // Set by the executor while an any-source receive waits on this endpoint's next message: the
  // engine then arms it for sleeping like an endpoint with pending requests.
  bool watched = false;
  // Fails all pending requests with `why` and refuses new ones (abort, or a sibling failure).
  virtual void fail_all(const Status& why) = 0;
  // After fail_all: whether what it left for the peer (tcp's abort frame, naming the root
  // cause) has reached the peer. The engine waits for this briefly before it closes the
  // endpoint: closing a socket with input still unread resets the connection, and the reset
  // drops what was still queued for the peer.
  virtual bool farewell_delivered() const { return true; }
  // The peer's own word on why it left, where the transport carries one out of band and the
  // peer already left it (shm's close note: "failed and closed the connection; root cause:
  // ..."), while messages it sent before may still be waiting in order. Ok while it left none.
  // Consumes nothing, never blocks. (The staged endpoint asks when the peer's shared slots vanish.)
  virtual Status peer_farewell() const { return Status::Ok(); }
  virtual TransportKind kind() const = 0;
  // Human description for logs and errors: "tcp 10.0.0.2:41234 (2 sockets)".
  virtual std::string describe() const = 0;
  const EndpointCounters& counters() const { return counters_; }

 protected:
  EndpointCounters counters_;
};

// Helper for transports: complete / fail a request (keeps the state transition in one place).
inline void complete(Request* r) { r->state = ReqState::kDone; }
inline void fail(Request* r, const Status& s) {
  r->error = s;
  r->state = ReqState::kFailed;
}


// ---------------------------------------------------------------------------------------------
// Connection setup.
//
// The core owns rendezvous: it opens TCP sockets to the peer's listener (the lower rank
// connects, the higher rank accepts, so no pair is ever connected twice), authenticates them
// (magic, protocol version, per-job secret, communicator id, ranks) and only then hands them to
// the transport. The transport exchanges exactly one offer (active side, carried in the hello)
// and one answer (passive side, carried in the hello's reply):
//
//     active : c = t.start_connect(peer); hello.offer = c->offer()
//     passive: ep = t.accept(peer, offer, &answer, sockets)
//     active : ep = c->finish(answer, sockets)
//
// tcp uses the sockets as its data sockets (UCCL_NSOCKS_PERPEER of them); shm keeps one as a
// liveness channel (the kernel closes it when the peer dies) and passes the segment name in
// the offer; verbs passes QP numbers, LIDs/GIDs and MTU in offer and answer. The sockets are
// authenticated, so accept()/finish() may do a short blocking exchange bounded by a deadline.
struct PeerContext {
  int my_rank = -1;
  int peer_rank = -1;
  std::string peer_host;      // host name of the peer, for messages
  std::string peer_address;   // "ip:port" of the peer's listener, for messages
  int peer_pid = 0;
  double timeout_s = 0;       // deadline for any blocking step of the setup
  int level = -1;             // topology level of the pair (topology.h: 0 host, 1 cluster, 2 inter_cluster)
  // Key material shared by the two ranks alone (32 bytes; "" if none): from the job key, or in
  // the keyless mode from the store's job secret. tcp derives its TLS pre-shared key from it.
  std::string link_key;
  // Striping over networks (pair_lanes in path_choice.h): socket c of the connection runs over
  // lane c % lane_gbps.size(); rates weigh how much of a large message each socket carries
  // (0 = unknown, weighted as the others). Empty: one network.
  std::vector<double> lane_gbps;
  std::vector<std::string> lane_names;  // "eth1 10.211.1.0/24", for describe()
  std::string describe() const;  // "rank 3 (host b, 10.0.0.2:41234)"
};

class PendingConnect {
 public:
  virtual ~PendingConnect() = default;
  virtual std::string offer() = 0;
  // Takes ownership of `fds` (closes them on failure).
  virtual Result<Endpoint*> finish(const std::string& answer, const std::vector<int>& fds) = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual TransportKind kind() const = 0;
  // How many authenticated sockets the core should open for one connection.
  virtual int sockets_per_connection() const { return 1; }
  // True if the transport spreads a connection's sockets over PeerContext::lane_gbps (the core
  // then dials socket c to the peer's address on lane c, and opens at least one per lane).
  virtual bool stripes_over_networks() const { return false; }
  virtual Result<PendingConnect*> start_connect(const PeerContext& peer) = 0;
  // Returns a new Endpoint owned by the caller, which then owns `fds`. On failure the fds stay
  // the caller's: the core sends the refusal on them (kNotSupported makes the connecting side
  // try its next transport) and closes them.
  virtual Result<Endpoint*> accept(const PeerContext& peer, const std::string& offer,
                                   std::string* answer, const std::vector<int>& fds) = 0;
};

// Shared by every transport so that errors read the same whichever carried the bytes.
std::string envelope_to_string(const Envelope& e);  // "all_reduce #12 (count 10, float32, sum)"
// The receiver expected `expect`/`expect_bytes` but the peer sent `got`/`got_bytes`.
Status mismatch_error(const PeerContext& peer, const Envelope& expect, size_t expect_bytes,
                      const Envelope& got, size_t got_bytes);
// The peer vanished: "rank 3 (host b, 10.0.0.2:41234) closed the connection (<detail>)".
Status peer_closed_error(const PeerContext& peer, const std::string& detail);


// A rank that fails tells each peer why before it closes: tcp puts an abort frame in the stream,
// shm leaves a note in the segment, verbs writes one on its liveness socket. A rank whose
// neighbour failed because of a third rank then names the third rank, also when the store that
// holds failure records has gone down with it. The note is the root cause only.
constexpr size_t kMaxCloseNoteBytes = 1024;
// "rank 1 (host a, ...) failed and closed the connection; root cause: <root_cause>"
Status peer_failed_error(const PeerContext& peer, const std::string& root_cause);
// For a socket that carries nothing else (verbs' liveness socket): a best-effort non-blocking
// send of the note, and reading it back once the peer has closed ("" if it left none).
void send_close_note(int fd, const std::string& note);
std::string read_close_note(int fd);

}  // namespace uccl
