// Agreement: how the survivors of a failed communicator agree on who failed (Communicator::shrink).
//
// Contract. Every rank of a communicator that calls agree() gets, within a bounded time, either
// the same Decision as every other rank that gets one (the failed ranks, the address of the
// store the survivors' new communicator uses and its fresh key prefix), or an error: kAborted
// when the decision excluded this rank (it was suspected: it did not answer in time), kTimeout
// when no decision was reached in time. A rank that fails during the agreement (the coordinator
// included) is handled: the others go on with the next coordinator, and it ends up excluded.
//
// Why not the store: the store is served by one rank's process (rank 0 under uccl.init()); when
// that rank is the one that died the store is gone. So the agreement runs over the ranks' own
// agreement listeners (one per communicator, opened at creation, published in PeerInfo::agree,
// kept open after a failure while the communicator or its shrunk successor lives), and the
// coordinator serves a fresh store for the new communicator; its address is part of the decision.
//
// Protocol (a coordinator-based two-phase commit with ballots, in the manner of Paxos):
//  * Suspicion. A rank suspects a peer when an agreement request to it fails: refused or closed
//    connection (its process is gone), a connect its host does not answer for the dead-link
//    bound (UCCL_TCP_DEAD_LINK_S: a dead host or link; lost SYNs are retried meanwhile), no
//    answer within the communicator's timeout (it hangs, or never calls shrink: a slow rank), or
//    a reply that does not authenticate. A request from
//    a suspected rank clears the suspicion (it is alive and talking).
//  * Coordinator: the lowest rank a rank does not suspect. A rank that is not coordinator asks
//    its coordinator for its state (STATE) every few tens of milliseconds until it learns a
//    decision (in the reply or by a COMMIT); when that request fails, it suspects the
//    coordinator and the next lowest rank takes over.
//  * A coordinator's round, ballot b = (round, rank), higher than any it has seen:
//      1. PREPARE(b) to every rank it does not suspect. A rank promises b when b is not lower
//         than what it promised, and replies with its state. A reply carrying a decision is
//         adopted as is (committed to every survivor it names). A refusal (a higher ballot was
//         promised: another coordinator is at work) ends the round. Ranks that fail to answer
//         become suspects.
//      2. The proposal: failed = the coordinator's suspects; store = a store server it starts
//         now; prefix = "uccl/shrink/<round>.<rank>/". ACCEPT(b, D) to every survivor; a
//         survivor accepts when it promised nothing higher. If any survivor fails to answer, it
//         is suspected and a new round starts (excluding it); a refusal ends the round.
//      3. COMMIT(b, D) to every survivor, then to itself. A rank records the decision only if it
//         promised no higher ballot than b (else the request is refused).
//    Safety: a rank decides D only while it has promised nothing higher than D's ballot, and a
//    later coordinator's PREPARE is answered (under the same lock) with any decision the rank
//    already holds, so a later round either reaches a rank before it decides (and that rank
//    then refuses the older COMMIT) or adopts its decision. A rank that decided keeps answering
//    (STATE, PREPARE) with its decision for as long as the old or the new communicator lives, so
//    a late or wrongly suspected rank learns the decision and that it was excluded.
//  * Instances. A decision names its coordinator as the new communicator's rank 0 and store.
//    When the coordinator dies right after deciding, the survivors cannot reach that store; they
//    then all run the next instance (a separate agreement with its own ballots) on the old
//    communicator, which excludes it. Suspicions carry over from one instance to the next.
//    Limit (no quorum): ranks cut off from each other for longer than the dead-link bound (a
//    network partition, not a crash or a slow rank) can decide separately, as with ULFM's shrink.
//  * Every request travels on its own TCP connection to the receiver's agreement listener:
//    AgreeHeader, body (text lines, at most kMaxAgreeBody bytes), then kMacBytes of
//    HMAC-SHA256(job key + the communicator's secret, header + body): only ranks of this
//    communicator can speak, and the secret never travels. The reply has the same form.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "uccl/status.h"

namespace uccl {

class TcpStoreServer;

constexpr uint32_t kAgreeMagic = 0x47414355;  // "UCAG"
constexpr uint16_t kAgreeVersion = 1;
constexpr uint32_t kMaxAgreeBody = 64 * 1024;

enum class AgreeType : uint8_t { kPrepare = 1, kAccept = 2, kCommit = 3, kState = 4, kReply = 0x80 };

#pragma pack(push, 1)
struct AgreeHeader {
  uint32_t magic;
  uint16_t version;
  uint8_t type;  // AgreeType
  uint8_t pad;
  uint64_t comm_id;
  int32_t from_rank;
  int32_t to_rank;
  uint32_t body_bytes;  // followed by the body, then the MAC
};
#pragma pack(pop)

struct Ballot {
  uint64_t round = 0;
  int rank = -1;
  bool operator<(const Ballot& o) const { return round != o.round ? round < o.round : rank < o.rank; }
  bool operator==(const Ballot& o) const { return round == o.round && rank == o.rank; }
};

// What the survivors agreed on.
struct Decision {
  Ballot ballot;            // of the round that proposed it (ballot.rank coordinated: new rank 0)
  std::vector<int> failed;  // sorted old ranks
  std::string store;        // "host:port" of the store the new communicator uses
  std::string prefix;       // its key prefix there
  bool excludes(int rank) const;
  std::string describe() const;  // "ranks 1, 3 failed (decided by rank 0, round 2)"
};

// One message body (requests and replies share the format).
struct AgreeMsg {
  AgreeType type = AgreeType::kState;
  uint32_t instance = 0;   // which agreement of this communicator (a retry after a failed one)
  Ballot ballot;           // requests: the sender's ballot
  bool ok = false;         // replies: the request was granted
  Ballot promised;         // replies: what the replier has promised
  bool has_decision = false;
  Decision decision;       // ACCEPT/COMMIT: the proposal; replies: the replier's decision
};

// The text body of a message, and its strict parser (size bounds the ranks in `failed`).
std::string encode_agree_body(const AgreeMsg& m);
Result<AgreeMsg> parse_agree_body(const std::string& body, int size);
// A whole frame (header, body, MAC) and its check: magic, version, comm id, addressee, MAC,
// then the body. *from gets the sender. What arrives from the network goes through here.
std::string encode_agree_frame(const std::string& key, uint64_t comm_id, int from, int to, const AgreeMsg& m);
Result<AgreeMsg> parse_agree_frame(const std::string& key, uint64_t comm_id, int me, int size,
                                   const std::string& frame, int* from);

// One communicator's agreement listener and the state of its agreements.
class AgreementPort {
 public:
  struct Context {
    int rank = 0, size = 1;
    uint64_t comm_id = 0;
    std::string key;                  // MAC key: job key + the communicator's secret
    std::vector<std::string> peers;   // each rank's agreement listener ("host:port")
    std::string my_ip;                // where the coordinator serves the new store
    double timeout_s = 30;            // per request; suspicion after that
    uint32_t instance = 0;            // 0, then 1, ... when a decided communicator could not be formed
    // Ranks the caller excludes up front (Communicator::shrink_excluding; every survivor passes
    // the same list): suspects from the start that are never asked, whose requests are refused
    // and whose suspicion nothing clears (they may be alive: excluded is not the same as dead).
    std::vector<int> excluded;
  };
  // Takes a listening socket (blocking or not; it is polled).
  explicit AgreementPort(int listen_fd);
  ~AgreementPort();
  AgreementPort(const AgreementPort&) = delete;
  AgreementPort& operator=(const AgreementPort&) = delete;

  // Runs the agreement (see the header comment); bounded by a few timeouts. Collective over
  // the surviving ranks. Once it returned a decision, later calls return the same one.
  Result<Decision> agree(const Context& ctx);
  // The store server this rank started as coordinator of the decided round (nullptr if none).
  std::shared_ptr<TcpStoreServer> store_server();

 private:
  struct State;
  void serve(const Context& ctx);  // the responder thread
  void handle(const Context& ctx, int fd);
  Status coordinate(const Context& ctx);
  std::vector<Result<AgreeMsg>> rpc_all(const Context& ctx, const std::vector<int>& to, const AgreeMsg& m,
                                        double deadline);

  int fd_;
  std::unique_ptr<State> st_;
  std::thread server_;
};

}  // namespace uccl
