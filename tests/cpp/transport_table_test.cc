// The transport table and the fallback (transports/registry.h): the built-in entries, their
// order and config variables, and a connect answered with kNotSupported (on this rank or in the
// peer's accept) making the connection manager try the next transport. Ranks are threads of one
// process, so the test transports registered here are seen by every rank.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/config.h"
#include "transports/registry.h"
#include "uccl/communicator.h"
#include "uccl/tcp_store.h"

using namespace uccl;

namespace {

// A transport that always refuses: in start_connect() on the connecting rank ("refuse_here"),
// or in accept() on the peer after the handshake carried its offer ("refuse_there").
class RefusingTransport : public Transport {
 public:
  RefusingTransport(TransportKind id, bool in_accept) : id_(id), in_accept_(in_accept) {}
  TransportKind kind() const override { return id_; }
  Result<PendingConnect*> start_connect(const PeerContext&) override {
    if (!in_accept_) return NotSupported("test transport refuses to connect");
    return static_cast<PendingConnect*>(new Pending);
  }
  Result<Endpoint*> accept(const PeerContext&, const std::string&, std::string*, const std::vector<int>&) override {
    return NotSupported("test transport refuses to accept");
  }

 private:
  struct Pending : PendingConnect {
    std::string offer() override { return "refuse"; }
    Result<Endpoint*> finish(const std::string&, const std::vector<int>&) override {
      return Internal("finish() after a refused accept");
    }
  };
  TransportKind id_;
  bool in_accept_;
};

// Registers the two refusing transports (ids 6 and 7, above every built-in priority) for the
// lifetime of the object.
struct Refusers {
  Refusers() {
    register_transport(entry("refuse_here", 6, 100, false));
    register_transport(entry("refuse_there", 7, 90, true));
  }
  ~Refusers() {
    unregister_transport("refuse_here");
    unregister_transport("refuse_there");
  }
  static TransportEntry entry(const char* name, int id, int priority, bool in_accept) {
    TransportEntry e;
    e.name = name;
    e.id = static_cast<TransportKind>(id);
    e.priority = priority;
    e.can_connect = [](const PeerInfo&, const PeerInfo&) {
      PathVerdict v;
      v.ok = true;
      v.why = "test: claims every pair";
      return v;
    };
    e.make = [id, in_accept] { return std::unique_ptr<Transport>(new RefusingTransport(static_cast<TransportKind>(id), in_accept)); };
    return e;
  }
};

struct RankResult {
  Status status;
  bool exact = false;
  std::string describe;
  OpStats stats;
};

// One all_reduce (int64 sum, odd count) on `n` thread ranks with `opts`.
std::vector<RankResult> run_all_reduce(int n, const CommOptions& opts) {
  static int generation = 0;
  auto server = TcpStoreServer::start("127.0.0.1", 0);
  REQUIRE(server.ok());
  const int port = server.value()->port();
  const std::string prefix = "table" + std::to_string(generation++) + "/";
  std::vector<RankResult> out(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      RankResult& res = out[r];
      auto store = connect_tcp_store("127.0.0.1", port, 30);
      if (!store.ok()) {
        res.status = store.status();
        return;
      }
      auto comm = Communicator::create(r, n, std::make_shared<PrefixStore>(store.value(), prefix), opts);
      if (!comm.ok()) {
        res.status = comm.status();
        return;
      }
      const size_t count = 100003;
      std::vector<int64_t> in(count), got(count, -1);
      for (size_t i = 0; i < count; ++i) in[i] = int64_t(r + 1) * int64_t(i % 1000);
      auto w = comm.value()->all_reduce({in.data(), got.data(), count, DataType::kInt64, RedOp::kSum});
      res.status = w.ok() ? w.value()->wait(60) : w.status();
      if (res.status.ok()) {
        res.exact = true;
        for (size_t i = 0; i < count; ++i) res.exact = res.exact && got[i] == int64_t(n * (n + 1) / 2) * int64_t(i % 1000);
        res.stats = w.value()->stats();
      }
      res.describe = comm.value()->describe();
      if (!res.status.ok()) comm.value()->abort("test done");
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }
uint64_t sent_by(const OpStats& s, TransportKind k) { return s.bytes_sent_by_transport[static_cast<int>(k)]; }

// Every rank finished with exact results, its bytes carried by `carrier` only.
void check_exact_over(const std::vector<RankResult>& res, TransportKind carrier) {
  for (size_t r = 0; r < res.size(); ++r) {
    INFO("rank " << r << ": " << res[r].status.to_string() << "\n" << res[r].describe);
    CHECK(res[r].status.ok());
    CHECK(res[r].exact);
    CHECK(sent_by(res[r].stats, carrier) > 0);
    for (int k = 0; k < kMaxTransports; ++k)
      if (k != static_cast<int>(carrier)) CHECK(res[r].stats.bytes_sent_by_transport[k] == 0);
  }
}

}  // namespace

TEST_CASE("the built-in transports are in the table, best first, each with its rule and variables") {
  auto table = transport_table();
  std::vector<std::string> names;
  for (auto* e : table) names.push_back(e->name);
  REQUIRE(find_transport("tcp"));
  REQUIRE(find_transport("shm"));
  CHECK(find_transport(TransportKind::kTcp)->name == "tcp");
  CHECK(std::string(transport_name(TransportKind::kShm)) == "shm");
  CHECK(find_transport("nonesuch") == nullptr);
  // shm before verbs before tcp: shared memory beats any NIC, an RDMA fabric beats TCP.
  auto pos = [&](const std::string& n) { return std::find(names.begin(), names.end(), n) - names.begin(); };
  CHECK(pos("shm") < pos("tcp"));
  if (const TransportEntry* v = find_transport("verbs")) {
    CHECK(find_transport("ib") == v);
    CHECK(pos("shm") < pos("verbs"));
    CHECK(pos("verbs") < pos("tcp"));
  }
  // Each entry's own variables are in the one table that uccl.info and the README print.
  std::vector<std::string> rows;
  for (auto& r : config_table()) rows.push_back(r.name);
  for (auto* e : table) {
    CHECK(e->can_connect);
    CHECK(e->make);
    for (const ConfigVar* v : e->config) CHECK(std::count(rows.begin(), rows.end(), v->name()) == 1);
  }
  CHECK(find_transport("tcp")->config.size() >= 1);
  CHECK(find_transport("shm")->config.size() >= 1);
}

TEST_CASE("a transport that refuses, here or in the peer's accept, falls back to the next: exact over tcp") {
  Refusers refusers;
  CommOptions opts;
  opts.transport = "refuse_here,refuse_there,tcp";
  opts.timeout_s = 60;
  auto res = run_all_reduce(3, opts);
  check_exact_over(res, TransportKind::kTcp);
  // The connecting (lower) rank saw both refusals, the accepting one the second; describe() says why.
  CHECK(contains(res[0].describe, "refuse_here refused here: test transport refuses to connect"));
  CHECK(contains(res[0].describe, "refuse_there refused by rank 1"));
  CHECK(contains(res[0].describe, "test transport refuses to accept"));
  CHECK(contains(res[2].describe, "refuse_there refused here: test transport refuses to accept"));
  CHECK(contains(res[2].describe, "tcp "));
}

TEST_CASE("in auto mode the refusals fall back to the best built-in transport (shm on one host)") {
  Refusers refusers;
  CommOptions opts;
  opts.transport = "auto";
  opts.timeout_s = 60;
  auto res = run_all_reduce(2, opts);
  check_exact_over(res, TransportKind::kShm);
  for (auto& r : res) CHECK(contains(r.describe, "fell back"));
}

TEST_CASE("when every listed transport refuses, the operation fails with NotSupported saying why") {
  Refusers refusers;
  CommOptions opts;
  opts.transport = "refuse_here";
  opts.timeout_s = 30;
  auto res = run_all_reduce(2, opts);
  INFO("rank 0: " << res[0].status.to_string());
  CHECK(res[0].status.code() == Code::kNotSupported);
  CHECK(contains(res[0].status.message(), "refuse_here refused here"));
  CHECK(!res[1].status.ok());  // told by rank 0's failure notice, not by a timeout
  CHECK(res[1].status.code() != Code::kTimeout);
}

TEST_CASE("an unknown transport name is refused with the names that exist") {
  CommOptions opts;
  opts.transport = "tcp,carrier-pigeon";
  opts.timeout_s = 30;
  auto res = run_all_reduce(2, opts);
  CHECK(res[0].status.code() == Code::kInvalidArgument);
  CHECK(contains(res[0].status.message(), "unknown transport 'carrier-pigeon'"));
  CHECK(contains(res[0].status.message(), "tcp"));
}
