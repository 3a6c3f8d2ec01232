// Shared staging slots (transports/staged/staged_slots.h): the sender's segment and the
// receiver's mapping of it, the consumed words that give slots back, and the checks on notes.
// Also the staged transport's sizes where its settings say auto (staged_endpoint.h).
#include <sys/stat.h>

#include <cstring>
#include <string>

#include "base/sim_device.h"
#include "test_util.h"
#include "transports/staged/staged_endpoint.h"
#include "transports/staged/staged_slots.h"

using namespace uccl;

namespace {
bool name_exists(const std::string& name) {
  struct stat st;
  return stat(("/dev/shm" + name).c_str(), &st) == 0;
}
}  // namespace

TEST_CASE("a note names a slot the peer reads, and its consumed word gives the slot back") {
  auto seg = SlotSegment::create(3, 100000);  // slots rounded up to pages
  REQUIRE(seg.ok());
  SlotSegment& s = seg.value();
  CHECK(s.slots() == 3);
  std::memset(s.slot(2), 0x5a, 100000);
  SlotNote n = s.note(2, 7, 100000);
  CHECK(name_exists(n.segment));

  PeerSlots peer;
  auto p = peer.open(n);
  REQUIRE(p.ok());
  CHECK(!name_exists(n.segment));  // the reader unlinks once mapped
  CHECK(static_cast<unsigned char>(p.value()[99999]) == 0x5a);
  CHECK(!s.consumed(2, 7));
  peer.consume(n);
  CHECK(s.consumed(2, 7));
  CHECK(!s.consumed(1, 7));

  // A later note from the same segment reuses the mapping.
  SlotNote m = s.note(0, 8, 10);
  auto q = peer.open(m);
  REQUIRE(q.ok());
  CHECK(q.value() == s.slot(0) - s.base() + peer.base());
}

TEST_CASE("giving a slot back rings the sender's bell only while the sender sleeps on it") {
  auto seg = SlotSegment::create(2, 4096);
  REQUIRE(seg.ok());
  SlotSegment& s = seg.value();
  FutexBell* bell = s.consumed_bell();
  PeerSlots peer;
  SlotNote a = s.note(0, 1, 10);
  REQUIRE(peer.open(a).ok());
  const uint32_t v0 = bell->seq.load();
  peer.consume(a);
  CHECK(bell->seq.load() == v0);  // nobody sleeps: not rung
  const uint32_t v1 = bell->arm();
  SlotNote b = s.note(1, 2, 10);
  REQUIRE(peer.open(b).ok());
  peer.consume(b);
  CHECK(bell->seq.load() != v1);  // a FUTEX_WAIT for v1 now returns at once
  CHECK(bell->sleeping.load() == 0);
  CHECK(s.consumed(1, 2));
}

TEST_CASE("bad notes are refused with what was wrong") {
  auto seg = SlotSegment::create(2, 4096);
  REQUIRE(seg.ok());
  PeerSlots peer;
  SlotNote n = seg.value().note(1, 1, 4096);

  SlotNote bad = n;
  bad.magic = 1;
  auto r = peer.open(bad);
  CHECK(r.status().code() == Code::kRemoteError);

  bad = n;
  bad.slot = 2;
  r = peer.open(bad);
  CHECK(r.status().code() == Code::kRemoteError);
  CHECK(r.status().message().find("slot 2") != std::string::npos);

  bad = n;
  bad.bytes = 4097;
  CHECK(!peer.open(bad).ok());

  bad = n;
  std::snprintf(bad.segment, sizeof bad.segment, "/not-ours");
  CHECK(peer.open(bad).status().code() == Code::kInvalidArgument);

  bad = n;
  std::snprintf(bad.segment, sizeof bad.segment, "/uccl-1-00000000deadbeef");  // gone
  CHECK(peer.open(bad).status().code() == Code::kNotSupported);

  bad = n;
  bad.segment_bytes += 4096;  // not the size the file has
  CHECK(!peer.open(bad).ok());

  CHECK(peer.open(n).ok());  // the good one still works after all that
}

TEST_CASE("the sender's segment is unlinked at teardown when no peer mapped it") {
  std::string name;
  {
    auto seg = SlotSegment::create(1, 4096);
    REQUIRE(seg.ok());
    name = seg.value().note(0, 1, 1).segment;
    CHECK(name_exists(name));
  }
  CHECK(!name_exists(name));
}

TEST_CASE("a note from a new segment replaces the mapping and hands the old one over, still mapped") {
  auto a = SlotSegment::create(1, 4096);
  auto b = SlotSegment::create(1, 4096);
  REQUIRE((a.ok() && b.ok()));
  std::memset(a.value().slot(0), 1, 4096);
  std::memset(b.value().slot(0), 2, 4096);
  PeerSlots peer;
  REQUIRE(peer.open(a.value().note(0, 1, 4096)).ok());
  CHECK(peer.take_retired().base() == nullptr);
  char* first = peer.base();
  auto q = peer.open(b.value().note(0, 1, 4096));
  REQUIRE(q.ok());
  CHECK(q.value()[0] == 2);
  SharedMapping old = peer.take_retired();
  REQUIRE(old.base() == first);  // not unmapped yet: it may still be registered for DMA
  CHECK(old.base()[4096] == 1);  // slot 0 of segment a, after its header page: still readable
}

TEST_CASE("the auto staging chunk is what a device backend owning memory asks for, and the bounce 4 of it") {
  // Nothing else here owns device memory (the default sim backend has no allocation).
  CHECK(staged_chunk_wanted() == kStagedDefaultChunk);
  static SimBackend* chunky = [] {
    SimOptions o;
    o.name = "sim_chunky";
    o.devices = 1;
    o.staging_chunk_bytes = (3u << 20) + 5;  // rounded down to 64 bytes, as the offer is
    auto* b = new SimBackend(o);             // registered for the process's lifetime
    register_device_backend(b);
    return b;
  }();
  CHECK(staged_chunk_wanted() == kStagedDefaultChunk);  // registered, but owns no memory yet
  // UCCL_STAGED=on before the process touched its device: what the available backends ask for
  // (at least this one's; cuda's too where a GPU is).
  CHECK(staged_chunk_wanted(true) >= 3u << 20);
  auto mem = chunky->alloc(0, 4096);
  REQUIRE(mem.ok());
  CHECK(staged_chunk_wanted() == 3u << 20);
  CHECK(staged_bounce_for(3u << 20) == 12u << 20);
  CHECK(staged_bounce_for(8u << 20) == 32u << 20);  // cuda's chunk
  CHECK(staged_bounce_for(kStagedDefaultChunk) == 8u << 20);
  CHECK(staged_bounce_for(0) == 8u << 20);  // whole mode
  chunky->free(mem.value());
  CHECK(staged_chunk_wanted() == kStagedDefaultChunk);
}
