// ConnectionManager: rendezvous and authentication for one communicator's data connections.
//
// Connections are made lazily, on first use, and always by the lower rank of a pair: the
// higher rank only accepts. So a pair is never connected twice, nothing serializes on rank 0,
// and a rank connects only to the peers its algorithms actually talk to.
//
// Everything here is driven by progress() and never blocks for long: the listener is
// non-blocking, an incoming hello is read incrementally (a stray client that sends half a
// header cannot stall the engine; it is dropped after a deadline), an outgoing connection's
// sockets connect in steps (base/net.h Dialer: a host that does not answer would otherwise hold
// the engine for a whole connect window) and it waits for its acknowledgement in progress().
// The only blocking steps are a store lookup of the peer's PeerInfo (bounded by a short timeout
// and retried) and writing a hello or an ack of a few bytes into a fresh socket.
//
// Which transport: the candidates of the transport table for the pair (transports/
// path_choice.h), best first. A transport that answers kNotSupported, in start_connect() here
// or in accept() on the peer (its ack carries the code), is a normal answer: the lower rank
// tries the next candidate on its next endpoint() call, and both sides note why for
// describe(). Any other error fails the peer. The code is split by responsibility:
// connection_manager.cc (endpoints, peers, paths, progress), connection_dial.cc (the active
// side: dialing, fallback), connection_accept.cc (the passive side), connection_failures.cc
// (failure records, notices, probes).
#pragma once

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/net.h"
#include "uccl/store.h"
#include "uccl/communicator.h"
#include "core/handshake.h"
#include "topology/peer_info.h"
#include "transports/path_choice.h"
#include "transports/transport.h"

namespace uccl {

// The job-wide settings (base/config.h Scope::kJob) as a communicator with these options has
// them, name and value: UCCL_ALGO's entry is the algorithm its option and UCCL_ALGO resolve to.
// Published with the PeerInfo (a pair whose settings differ refuses to connect) and part of
// grow()'s fingerprint.
std::vector<std::pair<std::string, std::string>> job_wide_settings(const CommOptions& opts);

class ConnectionManager {
 public:
  ConnectionManager(int rank, int size, std::shared_ptr<Store> store, const CommOptions& opts, double timeout_s);
  ~ConnectionManager();

  // Opens the listeners, agrees on the job secret / communicator id (rank 0 creates them) and
  // publishes this rank's PeerInfo. Collective only through the store.
  Status init();

  // The endpoint to `peer`, or nullptr while its connection is being set up (call again after
  // progress()). The first call starts the connection if this rank is the lower one.
  Result<Endpoint*> endpoint(int peer);
  // The endpoint for an operation on device memory: endpoint(peer), put behind a staged
  // endpoint (transports/staged, whole-message mode) when the pair was not negotiated as staged.
  Result<Endpoint*> staged_endpoint(int peer);
  // Accepts incoming connections and advances handshakes. Returns true if anything happened.
  bool progress();
  // Closes every endpoint and pending connection (the peers then see the connection close).
  void close_all();
  // File descriptors worth sleeping on in poll() while idle (listeners, handshakes).
  void collect_wait_fds(std::vector<int>* fds) const;

  const std::vector<std::unique_ptr<Endpoint>>& endpoints() const { return endpoints_; }
  const PeerInfo& my_info() const { return me_; }
  // PeerInfo of a peer (fetched from the store and cached; may block up to timeout_s).
  Result<const PeerInfo*> peer_info(int peer, double timeout_s);
  // The transports this rank would try towards `peer`, best first (needs its PeerInfo).
  Result<std::vector<PathChoice>> paths_to(const PeerInfo& peer);
  // Topology level of `peer` (0 same host, 1 same cluster, 2 other cluster) from the cached
  // PeerInfo; -1 while unknown. For per-level byte counters; never blocks.
  int peer_level(int peer) const;
  std::string describe();
  // Failure records in the store, so that a cascade of closed connections still names the
  // root cause: a failing rank publishes why before closing its sockets, and a rank that sees
  // a peer close looks the peer's record up (waiting at most timeout_s).
  void publish_failure(const std::string& why);
  std::string peer_failure(int peer, double timeout_s);
  // A failing rank's notice to the peers it has no connection with (they would otherwise
  // learn of the failure only from a refused connection, which says nothing about why, and
  // the store holding the records may be gone). Nearest ranks first, bounded to half a second.
  void notify_failure(const std::string& why);
  // The rank whose process serves the store (0 under uccl.init()), -1 when unknown. Set by init().
  int store_rank() const { return store_rank_; }
  // The agreement listener (core/agreement.h), opened by init() on the first interface and
  // published as PeerInfo::agree; the communicator takes it over (-1 once taken). Not closed
  // by close_all(): the survivors of a failure reach each other through it.
  int release_agreement_fd() {
    int fd = agree_fd_;
    agree_fd_ = -1;
    return fd;
  }
  const std::string& agreement_ip() const { return agree_ip_; }
  uint64_t comm_id() const { return comm_id_; }
  // The agreement's MAC key: the job key and this communicator's secret (never sent).
  std::string agreement_key() const { return key_ + std::string(reinterpret_cast<const char*>(secret_), kSecretBytes); }
  // Accepted sockets whose handshake is still being read, and sockets accepted so far (the
  // fuzzer waits for its connection to be accepted, listeners being polled only now and then,
  // and then for this to drain).
  size_t pending_handshakes() const { return incoming_.size(); }
  // Connections whose hellos came on some of their sockets, waiting for the others.
  size_t assembling_connections() const { return assembling_.size(); }
  uint64_t sockets_accepted() const { return sockets_accepted_; }

 private:
  struct Dialing;
  struct Outgoing;
  struct Incoming;
  struct Assembling;

  // Starts connecting over the next candidate transport; Ok (and nothing started) while the
  // peer has not published its PeerInfo yet.
  Status start_connect(int peer);
  // Starts opening the sockets of `path` to the peer's listener (every one of them: an attempt
  // that cannot open all falls back to the next address list), driven by progress() from then
  // on (advance_dial): a host that does not answer never holds the engine. `pending` was made
  // for a striped connection where the pair has lanes; if the sockets had to fall back to one
  // address, open_outgoing() makes it again without them.
  Status dial(int peer, const PathChoice& path, Transport* t, std::unique_ptr<PendingConnect> pending);
  enum class DialStep { kDialing, kOpen, kRetryLater, kFailed };
  // One look at an outgoing connection's sockets: still dialing; all open (o.fds); every attempt
  // failed without a refusal and within the dead-link bound (the next endpoint() call starts
  // again); or failed (*failed says why).
  DialStep advance_dial(Outgoing& o, Status* failed);
  // The sockets are open: sends the hellos with the offer (keyless) and readies the handshake.
  Status open_outgoing(Outgoing& o);
  // describe()'s line for a connection being made: the socket and address being dialed, or
  // the acknowledgement waited for (and how long the peer's host has not answered).
  std::string connecting_text(const Outgoing& o) const;
  // The hello of socket ch of an outgoing connection (transport, channels, offer size, flags).
  HelloHeader connection_hello(const Outgoing& o, size_t ch) const;
  // A transport refused this pair (kNotSupported), or striping fell back to one network:
  // remembered for describe() and logged (a warning when a NIC the pair shares did not work).
  void note_fallback(int peer, const std::string& what, bool one_network = false);
  // A higher rank cannot see a lower rank that died before connecting: after a second of
  // waiting it probes the peer's listener, and a refusal fails the peer instead of a hang.
  void probe_lower_rank(int peer);
  // A peer's host that does not answer a connect at all (no refusal: SYNs lost on a lossy or
  // congested network, or a dead link) is tried again on later passes; true once that has
  // lasted the dead-link bound (UCCL_TCP_DEAD_LINK_S, or the timeout when that is off) and the
  // peer should fail, with no_answer_text(peer) saying why ("has not answered a connect for
  // 20 s (...)", of the peer's host).
  bool unanswered_too_long(int peer);
  std::string no_answer_text(int peer) const;
  void open_agreement_listener();  // agree_fd_ and PeerInfo::agree (init())
  bool progress_outgoing();
  bool accept_new();
  bool progress_incoming();
  // Files an authenticated hello's socket under its connection's assembly (or refuses it).
  void assemble(Incoming& in);
  void finish_incoming(int from);
  // Drops assemblies past their deadline (their sockets closed, a warning naming the rank).
  bool expire_assemblies(double now);
  // How long the accepting side waits for an accepted socket's hello, and for the rest of a
  // connection's sockets once the first came.
  double accept_window_s() const { return std::min(timeout_s_, 30.0); }
  Transport* transport(TransportKind kind);
  PeerContext peer_context(int peer);
  void fail_peer(int peer, const Status& s);
  // What this side offers for staging on a new connection, asked when it is made (handshake.h
  // says why).
  static StagingOffer staging_offer_now();
  // A new connection's endpoint, behind a staged endpoint in split mode when either side
  // offered staging in the handshake (the chunk: the smaller offer; shared slots on shm when
  // both take them). Both sides combine the same two offers.
  Endpoint* wrap_staged(int peer, Endpoint* ep, const StagingOffer& mine, const StagingOffer& theirs);
  Status send_failure_notice(int peer, const std::string& why, double deadline);
  // A hello from this rank to `peer` (authenticated; transport and channel fields left 0).
  HelloHeader hello_to(int peer, uint8_t flags) const;
  // peer_context() plus what transport t needs of the pair (the networks tcp stripes over, if
  // `striped`: the connection's sockets really run over them): what start_connect() and
  // accept() get.
  PeerContext transport_context(int peer, const Transport& t, bool striped);
  // A socket to the first of the peer's listeners that accepts (each try bounded by per_try_s),
  // for the failure notice (a failing rank's last words; the liveness probe dials in steps).
  // *refused: every listener refused (its host answered: nothing listens there any more).
  Result<int> connect_listener(const PeerInfo& info, double per_try_s, double deadline, bool* refused = nullptr);
  // A failed store operation; one that is not a timeout names the rank serving the store.
  Status store_error(const Status& s);
  // Keyed mode (handshake.h): a job key is set, hellos and acks carry MACs.
  bool keyed() const { return !key_.empty(); }
  // Keyed mode, connecting side: the greeting on every socket of `o` read, hellos sent.
  Status greet_outgoing(Outgoing& o, bool* all_greeted, bool* moved);
  // Keyed mode, accepting side: an ack of code kUnauthenticated on a socket whose hello had a
  // wrong MAC (best effort; the socket is closed next).
  static void refuse_unauthenticated(int fd);
  // The 32-byte secret of the pair (this rank, peer) for PeerContext::link_key.
  std::string link_key(int peer) const;

  int rank_, size_;
  std::shared_ptr<Store> store_;
  CommOptions opts_;
  double timeout_s_;
  uint8_t secret_[kSecretBytes] = {};
  std::string key_;  // the job key ("" = keyless)
  uint64_t comm_id_ = 0;
  int store_rank_ = -1;  // 0 when rank 0's process serves the store, else unknown (-1)
  PeerInfo me_;
  std::string rail_why_;  // which per-local-rank UCCL_SOCKET_IFNAME entry was used ("" = no list)
  std::vector<int> listen_fds_;
  int agree_fd_ = -1;
  std::string agree_ip_;
  std::vector<std::unique_ptr<Transport>> transports_;  // indexed by transport id, created lazily
  std::vector<std::unique_ptr<Endpoint>> endpoints_;     // by peer rank
  std::vector<char> staged_;                             // by peer: endpoints_[peer] is a StagedEndpoint
  std::vector<Status> peer_errors_;                      // a failed connection attempt, by peer
  std::vector<size_t> next_path_;                        // by peer: the candidate to try next
  std::vector<double> unanswered_since_;                 // by peer: its host answers no connect since (0: it does)
  std::vector<double> redial_at_;                        // by peer: after a round of unanswered attempts, not before
  std::vector<std::string> fallback_notes_;              // by peer: transports that refused, why
  std::map<int, std::unique_ptr<PeerInfo>> peer_infos_;
  std::map<int, std::unique_ptr<Outgoing>> outgoing_;
  std::vector<std::unique_ptr<Incoming>> incoming_;
  std::map<int, std::unique_ptr<Assembling>> assembling_;
  struct ProbeState {
    double waiting_since = 0, last_probe = 0;
    // The probe in flight: the peer's listeners, the next to try, the try (never blocking the
    // engine: a host that does not answer would hold it for the whole try otherwise).
    std::vector<std::string> listen;
    size_t next = 0;
    bool all_refused = true;
    std::unique_ptr<Dialer> dialer;
  };
  // Advances a probe in flight: alive (a socket opened), refused by every listener (the peer
  // exited), or no answer (failed only after the dead-link bound).
  void advance_probe(int peer, ProbeState& st);
  std::map<int, ProbeState> probes_;
  // Listeners are polled (accept) at most this often while no handshake is in flight: a new
  // connection waits at most this long, a progress pass saves a failing accept() syscall.
  static constexpr double kAcceptIntervalS = 100e-6;
  double next_accept_s_ = 0;
  uint64_t sockets_accepted_ = 0;
  static constexpr int kClockEvery = 16;
  int calls_since_clock_ = kClockEvery;  // the first call looks at the clock
};

}  // namespace uccl
