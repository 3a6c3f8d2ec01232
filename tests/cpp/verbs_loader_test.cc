// Host-side checks of the verbs transport that need no RDMA device: the dlopen'ed loader
// answers cleanly (false + a reason) on hosts without devices or without rdma-core, the
// transport factory answers kNotSupported instead of crashing, UCCL_IB_HCA parsing follows
// NCCL, and the connection info round-trips / rejects garbage.
// The data path runs on Soft-RoCE in a VM: tests/verbs/run_vm_tests.sh.
#include <cstdio>
#include <cstring>

#include "test_util.h"
#include "uccl/status.h"

#if UCCL_HAVE_VERBS
#include "transports/verbs/verbs_hca_spec.h"
#include "transports/verbs/verbs_transport.h"
#include "transports/verbs/verbs_wire.h"

using namespace uccl;

TEST_CASE("UCCL_IB_HCA parsing follows NCCL") {
  HcaSpec all = HcaSpec::parse("");
  CHECK((all.matches("mlx5_0", 1) && all.matches("rxe1", 2)));
  HcaSpec s = HcaSpec::parse("mlx5_0:1,mlx5_1");
  CHECK((s.matches("mlx5_0", 1) && !s.matches("mlx5_0", 2)));
  CHECK((s.matches("mlx5_1", 1) && s.matches("mlx5_1", 2)));
  CHECK(!s.matches("mlx5_2", 1));
  CHECK(s.matches("mlx5_10", 1));  // prefix match, as in NCCL
  HcaSpec exact = HcaSpec::parse("=mlx5_1");
  CHECK((exact.matches("mlx5_1", 1) && !exact.matches("mlx5_10", 1)));
  HcaSpec ex = HcaSpec::parse("^mlx5_0");
  CHECK((!ex.matches("mlx5_0", 1) && ex.matches("mlx5_1", 1) && !ex.matches("mlx5_01", 1)));
  HcaSpec exex = HcaSpec::parse("^=mlx5_0:2");
  CHECK((exex.matches("mlx5_0", 1) && !exex.matches("mlx5_0", 2) && exex.matches("mlx5_01", 2)));
  HcaSpec blanks = HcaSpec::parse("rxe0 , rxe1:1");
  REQUIRE((blanks.entries.size() == 2 && blanks.matches("rxe1", 1) && !blanks.matches("rxe1", 2)));
}

TEST_CASE("verbs connection info round trip, garbage refused") {
  VerbsConnInfo c;
  c.device = "rxe0:1";
  c.link_layer = "roce";
  c.lid = 0;
  for (int i = 0; i < 16; ++i) c.gid[i] = static_cast<uint8_t>(i * 17);
  c.gid_index = 1;
  c.mtu = 3;
  c.qpn = {17, 18};
  c.psn = {0xabcdef, 7};
  c.mbox_addr = 0x7f0012345000ull;
  c.mbox_rkey = 0x1234;
  c.ctrl_slots = 64;
  c.ctrl_slot_bytes = 8320;
  std::string text = c.serialize();
  auto p = VerbsConnInfo::parse(text);
  REQUIRE_OK(p.status());
  const VerbsConnInfo& d = p.value();
  CHECK((d.device == c.device && d.link_layer == "roce" && d.gid_index == 1 && d.mtu == 3));
  CHECK(std::memcmp(d.gid, c.gid, 16) == 0);
  CHECK((d.qpn == c.qpn && d.psn == c.psn));
  CHECK((d.mbox_addr == c.mbox_addr && d.mbox_rkey == c.mbox_rkey));
  CHECK((d.ctrl_slots == 64 && d.ctrl_slot_bytes == 8320));
  CHECK(!VerbsConnInfo::parse("").ok());
  CHECK(!VerbsConnInfo::parse("uccl-verbs v=1").ok());
  CHECK(VerbsConnInfo::parse("hello world").status().code() == Code::kRemoteError);
  std::string v2 = text;
  v2.replace(v2.find("v=1"), 3, "v=2");
  auto bad = VerbsConnInfo::parse(v2);
  CHECK((!bad.ok() && bad.status().message().find("version") != std::string::npos));
}

TEST_CASE("verbs_available() says why not; the factory answers kNotSupported") {
  std::string why;
  bool ok = verbs_available(&why);
  std::printf("verbs_available() = %d (%s)\n", ok, why.c_str());
  if (!ok) {
    REQUIRE(!why.empty());
    // The factory still works and says kNotSupported with the same kind of reason.
    auto t = make_verbs_transport();
    CHECK((t && t->kind() == TransportKind::kVerbs));
    PeerContext peer;
    peer.peer_rank = 1;
    auto pc = t->start_connect(peer);
    CHECK((!pc.ok() && pc.status().code() == Code::kNotSupported));
    std::printf("start_connect: %s\n", pc.status().to_string().c_str());
    CHECK(list_verbs_nics().empty());
  }
  // A spec that matches nothing is a clean "no".
  CHECK(!verbs_available("no_such_hca_xyz", &why));
  REQUIRE(!why.empty());
  std::printf("UCCL_IB_HCA=no_such_hca_xyz: %s\n", why.c_str());

  // No rdma-core: simulated with a library name that does not exist.
  verbs_set_library_for_testing("libibverbs-does-not-exist.so.1");
  CHECK(!verbs_available(&why));
  CHECK(why.find("libibverbs-does-not-exist.so.1") != std::string::npos);
  std::printf("without libibverbs: %s\n", why.c_str());
  verbs_set_library_for_testing("");
  std::string why2;
  CHECK(verbs_available(&why2) == ok);
}

#else
TEST_CASE("verbs loader" * doctest::skip()) {}  // built without verbs (UCCL_HAVE_VERBS=0)
#endif
