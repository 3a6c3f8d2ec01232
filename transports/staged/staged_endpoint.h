// The staged endpoint: device memory over any host transport (tcp, shm, verbs), pipelined
// through pinned bounce buffers.
//
// Why a wrapper and not a table entry: staging is not a way to reach a peer but a way to feed
// one. The pair keeps the transport the table chose (shm on one host, verbs or tcp across), and
// a StagedEndpoint sits in front of that endpoint:
//
//  * Split mode (negotiated at connect time): every message of the pair, host or device, is cut
//    into sub-messages of exactly `chunk` bytes (the last one shorter; an empty message stays
//    one empty message), on both sides, by the same rule. So the wire of a rank passing host
//    buffers and one passing device buffers agrees without either knowing what the other
//    passes. A host buffer's sub-messages go straight from/to the user's memory (no copy); a
//    device buffer's go through a pool of pinned bounce slots: while chunk k is on the wire,
//    chunk k+1 is being copied device->host on the endpoint's "out" stream and chunk k-1
//    host->device on its "in" stream; a reducing receive reduces with the device's kernel (the
//    data is on the device: no round trip), reading the chunk straight out of its host slot
//    where the backend reduces from host memory and its kernels reach the slot
//    (reduces_from_host, kernel_view_of_host: zero-copy), else from a device slot it was copied to.
//    A pair is split when either rank offered staging when the pair connected (the offers
//    travel in the handshake, core/handshake.h; UCCL_STAGED: auto offers it when a device
//    backend may own memory in this process by then: connections are made on first use;
//    on always, off never); the chunk is the smaller of the two offers. Host-only pairs of
//    host-only processes are never wrapped: their code path is exactly the plain one.
//  * Shared slots (a split pair on shm whose ranks both offered them, UCCL_STAGED_SHARED): a
//    device chunk is not sent as bytes: the sender copies it into a slot of shared memory and
//    sends a note naming the slot; the receiver copies (or reduces) straight out of the slot.
//    No host-to-host copy is left (staged_slots.h has the protocol). A host buffer's chunks go
//    as bytes; each receive takes either form (RecvRequest::alt_dst, which shm honours), so
//    the receiver posts ahead and a large host chunk is still pushed as on a plain pair. Slots
//    are registered with the backend (pinned, mapped) unless a stream waits on a signal then;
//    where uccl's copies run as kernels a chunk of an unregistered slot goes through a pinned
//    hop (hop_for).
//  * Whole mode (no negotiation, chunk 0): a rank that passes device memory on a pair that was
//    not negotiated stages whole messages (one bounce buffer per message, then one send), the
//    wire being unchanged. Correct, not pipelined; it keeps mixed and late cases working.
//
// Sizes: the chunk is UCCL_STAGED_CHUNK_BYTES, or where auto what the device backends that may
// own memory ask for (DeviceBackend::staging_chunk_bytes: cuda 8 MiB), else 512 KiB; with
// UCCL_STAGED=on and no device memory yet (a process that makes its communicator before it
// touches its GPU), what the available backends ask for. The bounce bytes are
// UCCL_STAGED_BOUNCE_BYTES, or where auto 4 chunks (at least 8 MiB; H200, 8 MiB chunks: 32 MiB
// of bounce 21.2 GB/s, 64 MiB 21.8, the same within the noise at half the memory per peer).
//
// Bounded and released: each direction holds at most the bounce bytes / 2 of pooled
// slots (whole mode: one message-sized slot per direction at a time; shared slots: the sending
// direction's pool is the segment's slots). fail_all() waits for the copies already queued on
// the device (they are finite), then frees every slot, unregisters and unmaps the segment and
// the peer's mapping; the process-wide total is staged_bounce_bytes() (tests check it returns
// to 0 after a peer died, and that no name of ours is left in /dev/shm).
//
// Posting ahead (split mode: feeds()): the executor posts a device operation's next ring step
// while this one runs (core/schedule_executor.h post_ahead). A send whose payload is a receive's
// destination (SendRequest::fed_by) copies chunk k to the host only once that receive's chunk k
// is on the device (RecvRequest::delivered, kept current here); a receive into bytes a send has
// still to read (RecvRequest::guard) lets its chunk k wait in its slot until the send's copy of
// those bytes is done (SendRequest::consumed); a host buffer's chunk is posted only then. Neither
// holds a slot the other waits for: the fed send takes its slots after the earlier sends took
// theirs, and a guarded receive's slots come after those of the receives before it.
//
// Ordering: requests of one direction are posted to the inner endpoint in the caller's order
// (a later request waits until the earlier one has posted all its chunks), so the FIFO contract
// of transport.h holds for the sub-messages. A send completes when all its chunks were sent; a
// receive when its last chunk landed on the device (its events were queried: never waited on).
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/config.h"
#include "base/device.h"
#include "transports/staged/staged_slots.h"
#include "transports/transport.h"

namespace uccl {

extern const TextSetting kStaged;           // UCCL_STAGED: auto | on | off
extern const BytesSetting kStagedChunk;     // UCCL_STAGED_CHUNK_BYTES
extern const BytesSetting kStagedBounce;    // UCCL_STAGED_BOUNCE_BYTES
extern const TextSetting kStagedShared;     // UCCL_STAGED_SHARED: on | off

// The host's staging chunk: what UCCL_STAGED_CHUNK_BYTES=auto offers when no device backend
// that may own memory here asks for another (DeviceBackend::staging_chunk_bytes).
constexpr size_t kStagedDefaultChunk = 512u << 10;
// The chunk this process offers for split mode now (asked when a connection is made), or 0
// for none (UCCL_STAGED).
size_t staged_offer();
// UCCL_STAGED_CHUNK_BYTES, or where auto the largest chunk a device backend that may own
// memory here asks for; where none may, and `idle_too`, the largest an available backend asks
// for (UCCL_STAGED=on before the process touched its device); else kStagedDefaultChunk.
size_t staged_chunk_wanted(bool idle_too = false);
// Bounce bytes of a staged connection whose chunk is `chunk` (UCCL_STAGED_BOUNCE_BYTES, or
// where auto 4 chunks and at least 8 MiB).
size_t staged_bounce_for(size_t chunk);
// Whether this process offers shared staging slots (UCCL_STAGED_SHARED).
bool staged_shared_offer();
// Bytes of bounce buffers (pinned host and device slots) held by all staged endpoints now.
size_t staged_bounce_bytes();

class StagedEndpoint final : public Endpoint {
 public:
  // chunk > 0: split mode with that chunk; 0: whole mode. shared: device chunks through shared
  // slots (split mode on one host only). peer_rank names the peer in errors. why_whole: in whole
  // mode, why the pair is not split (describe() says it).
  StagedEndpoint(std::unique_ptr<Endpoint> inner, size_t chunk, size_t bounce_bytes, bool shared = false,
                 int peer_rank = -1, std::string why_whole = "");
  ~StagedEndpoint() override;

  void post_send(SendRequest* r) override;
  void post_recv(RecvRequest* r) override;
  bool progress() override;
  int wait_fd() const override { return inner_->wait_fd(); }
  // Any-source look-ahead (torch's recv without src): every chunk carries its message's
  // envelope, so the inner endpoint's next header names the message; in split mode the size is
  // a chunk's, and the matcher reads only the envelope (the receive then checks the size).
  Result<bool> peek(Envelope* env, size_t* bytes) override { return inner_->peek(env, bytes); }
  void arm_wait(WaitSet* ws) override;
  void disarm_wait() override;
  void note_waiting_on_cpu(int cpu) override { inner_->note_waiting_on_cpu(cpu); }
  bool peer_waits_on_cpu(int cpu) const override { return inner_->peer_waits_on_cpu(cpu); }
  bool has_pending() const override;
  void fail_all(const Status& why) override;
  // The inner endpoint's farewell (tcp's abort frame naming the root cause): closed before it
  // was delivered, a reset dropped it and the peer named this rank instead of the cause
  // (benchmarks/kill_points.py --device).
  bool farewell_delivered() const override { return inner_->farewell_delivered(); }
  Status peer_farewell() const override { return inner_->peer_farewell(); }
  TransportKind kind() const override { return inner_->kind(); }
  std::string describe() const override;
  // Split mode feeds (transport.h): a send's chunk is read only once its fed_by receive
  // delivered those bytes, a receive's chunk is written (landed on the device; a host buffer's:
  // posted) only once its guard send read them, and both keep consumed / delivered current.
  bool feeds() const override { return chunk_ > 0; }

  size_t chunk() const { return chunk_; }
  bool shared() const { return shared_; }
  Endpoint* inner() const { return inner_.get(); }

 private:
  struct Slot {
    char* host = nullptr;  // pinned
    void* dev = nullptr;   // device temporary of a reducing receive (made on first use)
    char* hop = nullptr;   // pinned block for a `host` no kernel reaches (hop_for; made on first use)
    size_t bytes = 0;
    bool pooled = true;
    std::unique_ptr<DeviceEvent> ev;
    // Shared slots (sending side): host is slot `index` of out_seg_; `seq` is the number of the
    // note last sent from it (the peer's consumed word must reach it before reuse).
    bool in_segment = false;
    size_t index = 0;
    uint64_t seq = 0;
  };
  enum class Stage : uint8_t { kIdle, kCopying, kPosted, kLanding, kDone };
  struct Chunk {
    size_t off = 0, len = 0;
    Stage stage = Stage::kIdle;
    Slot* slot = nullptr;
    SendRequest s;
    RecvRequest r;
    bool via_slot = false;         // shared slots: this chunk travels (or came) as `note`
    bool hop = false;              // sending: copied by kernel into slot->hop, moved to slot->host by the CPU
    const char* src = nullptr;     // receiving: the peer's slot it is read from
    SlotNote note;
    double t = 0;                  // when its current stage began (ChunkTimes)
  };
  struct Op {
    SendRequest* s = nullptr;  // exactly one of s / r
    RecvRequest* r = nullptr;
    MemoryLoc loc;             // where the user's buffer lives
    std::vector<Chunk> chunks;
    size_t started = 0, posted = 0, finished = 0;
    Status error;
    // Shared slots: the peer removed a segment it had just named in a note, so it failed or
    // exited; it fails its connection (whose abort note carries the root cause) before it frees
    // its slots, so the inner endpoint says why: at once where the note is out of band
    // (peer_farewell: shm's close note), else once its earlier messages are read. The op waits
    // for that, or fails with this after kGoneWaitS (finish).
    Status gone;
    double gone_at = 0;
    bool register_tried = false;  // shared slots: one try per op to register them for DMA
    double starved_since = 0;     // sending: when a chunk first found no free slot (ChunkTimes)
  };
  // Where device chunks' time goes, summed over the endpoint's life; describe() prints the
  // means, so a benchmark's path line says which stage a slow pipeline waits in. Each stage runs
  // from when it was queued to the progress pass that saw it done: polling delays count too.
  struct ChunkTimes {
    uint64_t sent = 0, received = 0;                 // device chunks timed
    double to_host = 0, to_peer = 0, slot_wait = 0;  // sending: device->host copy, the wire (or
                                                     // the note), waiting for a free slot
    double data_wait = 0, to_device = 0;             // receiving: the chunk's arrival, the copy
                                                     // (and reduce) on the device
    uint64_t hops = 0;                               // chunks through a pinned hop (hop_for)
  };
  struct Dir {
    std::deque<Op> ops;
    std::vector<std::unique_ptr<Slot>> pool;
    std::vector<Slot*> free_slots;
    std::unique_ptr<Slot> dedicated;  // whole mode: one message-sized slot
    bool dedicated_busy = false;
    std::unique_ptr<DeviceStream> stream;
    bool grow_refused = false;  // acquire: a new slot came pageable while pinned memory was scarce
  };

  void queue(Dir& d, SendRequest* s, RecvRequest* r, size_t bytes, const void* buf);
  // Posting ahead (feeds()): whether chunk c of op may be read (a send: its fed_by receive has
  // delivered its bytes) or written (a receive: its guard send has read them) now.
  static bool chunk_free(const Op& op, const Chunk& c);
  // Whether d has device copies queued (or, shared slots, slots the peer has not given back).
  static bool device_busy(const Dir& d);
  // Ops that wait with nothing posted on the inner endpoint (a device switch waiting for the
  // old device's copies, a pool waiting for a slot) would not learn that the peer died: the
  // inner endpoint checks its peer only while it has requests (and at peek()). Asks it; a dead
  // peer fails every op (found by benchmarks/kill_points.py --device: a survivor waited for the
  // communicator's timeout).
  void check_peer_alive();
  static constexpr double kGoneWaitS = 1.0;  // Op::gone: how long the inner endpoint may take to say why
  double alive_checked_at_ = 0;  // now_s() of the last check_peer_alive()
  // Moves one direction's ops along; returns true if anything moved.
  bool advance(Dir& d, bool is_send);
  bool advance_op(Dir& d, Op& op, bool is_send, bool may_post);
  // staged_receive.cc: a receive into device memory, through private slots or shared ones.
  bool advance_device_recv(Dir& d, Op& op, bool ready, bool may_post);
  bool advance_shared_recv(Dir& d, Op& op, bool may_post);
  void post_chunk_recv(Op& op, Chunk& c);  // the next chunk's receive, on the inner endpoint
  // Shared slots: registers a mapping for DMA with the op's backend, one try per op.
  void register_once(Op& op, char* base, size_t bytes, DeviceBackend** registered);
  // Copies (or reduces) a landed chunk to the device; records its slot's event.
  Status land_on_device(Dir& d, Op& op, Chunk& c, const char* from);
  // Receiving: landed chunks whose device work is done, in order, give back their slot (and
  // the peer's, for a note); returns true if any did.
  bool give_back_landed(Dir& d, Op& op);
  Status map_slots();     // shared slots, sending side: the segment, made on first use
  void reap_consumed();  // slots whose note the peer consumed become free
  void release_peer_slots();
  void retire_peer_mapping();  // the peer's previous segment, replaced by a note from a new one
  Slot* acquire(Dir& d, size_t len);
  // The slot's device temporary (a reducing receive on a backend that cannot reduce from host
  // memory), made on first use and counted in staged_bounce_bytes().
  Status device_temp(Slot* s);
  // Where uccl's copies run as kernels (device_copy_async) and no kernel reaches `host` (pageable
  // memory: shared slots made while a stream waited on a signal stay unregistered; pool slots or
  // a whole-mode slot made then, past the backend's pinned reserve), the pinned block the device
  // side uses instead, the CPU moving the bytes between it and `host`; in *bytes its size, or 0
  // for the device's hop. nullptr when no hop is needed (or none can be had: then the copy
  // goes by the engines, device.h's hazard). Why: an engine copy can queue behind a user's copy
  // that waits for this very operation. The hop is the slot's own (as big as the slot, made on
  // first use while pinned memory is not scarce) where it can be had, else the device's hop of
  // the process (device_hop() in staged_pool.cc: one SignalSafeMemory::kMinBlock per backend and
  // device, made when the first endpoint binds the device, before any pool spends the backend's
  // pinned reserve, and kept for the process's life; not counted in staged_bounce_bytes()). A
  // chunk moves through that one by pieces, each piece's copy waited for on the endpoint's own
  // stream (copy_out_by_pieces, land_on_device), the endpoints of every communicator taking
  // turns on it (hop_lock). That blocks the progress thread for the copies' time, the one place
  // this endpoint waits on the device: a fallback (a pageable slot, under kernel copies, while a
  // stream waits), bounded (the stream waits on nothing of the user's). Why one for the device and
  // not one per endpoint and direction, as before: the endpoints of several communicators spent
  // the reserve on theirs, the later ones' came pageable, and their chunks went by the engines
  // (tests/thread_soak.py seed 66 timed out so).
  char* hop_for(Slot* s, const void* host, size_t* bytes);
  // Locked on the device's hop when `hop` is it; else an empty lock.
  std::unique_lock<std::mutex> hop_lock(const char* hop);
  Status copy_out_by_pieces(Dir& d, Slot* s, char* hop, size_t hop_bytes, const char* src, size_t len);
  // Queues a received chunk's bytes [off, off + len) at `from` onto the device (copied, or
  // reduced into the destination) on d's stream.
  Status land_range(Dir& d, Op& op, Chunk& c, size_t off, const char* from, size_t len);
  void drop_slot(std::unique_ptr<Slot>& s);
  void release(Dir& d, Slot* s);
  Status ensure_device(const MemoryLoc& loc);
  void free_slots(Dir& d);
  void finish(Op& op, bool is_send);
  // A chunk's failure becomes its op's error unless the op already has one.
  static void keep_first_error(Op& op, const Request& q) {
    if (op.error.ok()) op.error = q.error;
  }

  std::unique_ptr<Endpoint> inner_;
  size_t chunk_, slots_per_dir_;
  DeviceBackend* backend_ = nullptr;
  int ordinal_ = -1;
  Dir out_, in_;
  bool shared_;
  int peer_rank_;
  std::string why_whole_;
  // Shared slots. Sending: the segment, the next note's number, the slots sent whose consumed
  // word has not come back. Receiving: the peer's segment.
  std::unique_ptr<SlotSegment> out_seg_;
  DeviceBackend* out_seg_registered_ = nullptr;
  bool slots_broken_ = false;  // no segment could be made: device chunks go as plain messages
  uint64_t next_seq_ = 0;
  std::vector<Slot*> unconsumed_;
  PeerSlots peer_slots_;
  DeviceBackend* peer_slots_registered_ = nullptr;
  std::vector<FutexBell*> armed_;  // the bells arm_wait() armed, until disarm_bells()
  void disarm_bells();
  bool failed_ = false;
  Status why_failed_;
  ChunkTimes times_;
};

}  // namespace uccl
