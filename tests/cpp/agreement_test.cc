// The shrink agreement (core/agreement.h): its messages (round trip, strict parsing, the MAC),
// and the protocol between threads of one process, each with its own agreement listener: all
// agree, a dead rank (closed listener) and a rank that never answers are excluded, every
// participant gets the same decision, and a late rank learns that it was excluded.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"
#include "base/net.h"
#include "core/agreement.h"

using namespace uccl;

namespace {

AgreeMsg proposal() {
  AgreeMsg m;
  m.type = AgreeType::kAccept;
  m.instance = 2;
  m.ballot = {7, 1};
  m.has_decision = true;
  m.decision.ballot = {7, 1};
  m.decision.failed = {0, 3};
  m.decision.store = "127.0.0.1:4242";
  m.decision.prefix = "uccl/shrink/2.7.1/";
  return m;
}

const std::string kKey = std::string("job") + std::string(16, '\x01');

struct Ranks {
  std::vector<int> fds;
  std::vector<std::string> addrs;
  explicit Ranks(int n) {
    for (int r = 0; r < n; ++r) {
      auto a = parse_address("127.0.0.1:0", 0).value();
      int fd = listen_on(&a).value();
      fds.push_back(fd);
      addrs.push_back(a.to_string());
    }
  }
  AgreementPort::Context ctx(int r, double timeout) const {
    AgreementPort::Context c;
    c.rank = r;
    c.size = static_cast<int>(fds.size());
    c.comm_id = 99;
    c.key = kKey;
    c.peers = addrs;
    c.my_ip = "127.0.0.1";
    c.timeout_s = timeout;
    return c;
  }
};

}  // namespace

TEST_CASE("agreement: a message survives its round trip and the frame checks its MAC") {
  const AgreeMsg m = proposal();
  auto back = parse_agree_body(encode_agree_body(m), 4);
  REQUIRE(back.ok());
  CHECK(back.value().instance == 2);
  CHECK(back.value().decision.failed == std::vector<int>{0, 3});
  CHECK(back.value().decision.store == m.decision.store);
  int from = -1;
  const std::string f = encode_agree_frame(kKey, 5, 1, 2, m);
  auto p = parse_agree_frame(kKey, 5, 2, 4, f, &from);
  REQUIRE(p.ok());
  CHECK(from == 1);
  CHECK(p.value().type == AgreeType::kAccept);
  CHECK(parse_agree_frame("another key", 5, 2, 4, f, &from).status().code() == Code::kUnauthenticated);
  CHECK(!parse_agree_frame(kKey, 6, 2, 4, f, &from).ok());  // another communicator
  CHECK(!parse_agree_frame(kKey, 5, 3, 4, f, &from).ok());  // addressed to another rank
  std::string flipped = f;
  flipped[sizeof(AgreeHeader) + 3] ^= 1;
  CHECK(parse_agree_frame(kKey, 5, 2, 4, flipped, &from).status().code() == Code::kUnauthenticated);
  CHECK(!parse_agree_frame(kKey, 5, 2, 4, f.substr(0, f.size() - 1), &from).ok());
}

TEST_CASE("agreement: the body parser refuses what it does not know") {
  CHECK(!parse_agree_body("", 4).ok());                                      // no ballot
  CHECK(!parse_agree_body("ballot 1 9\n", 4).ok());                          // rank out of range
  CHECK(!parse_agree_body("ballot 1 1\nfailed 2 1\nstore a:1\nprefix p\ndecision 1 1\n", 4).ok());  // unsorted
  CHECK(!parse_agree_body("ballot 1 1\nfailed 1\nstore a:1\nprefix p\ndecision 1 1\n", 4).ok());  // excludes its coordinator
  CHECK(!parse_agree_body("ballot 1 1\nstore a:1\n", 4).ok());               // incomplete decision
  CHECK(!parse_agree_body("ballot 1 1\nhello\n", 4).ok());
  CHECK(!parse_agree_body("ballot 99999999999999999999999 1\n", 4).ok());
  CHECK(parse_agree_body("ballot 0 -1\nok 1\npromised 3 2\n", 4).ok());
}

TEST_CASE("agreement: the survivors agree; a dead rank and a silent one are excluded; a late one learns it") {
  Ranks rs(5);
  ::close(rs.fds[1]);  // rank 1 is dead: its listener is gone (connections are refused)
  rs.fds[1] = -1;
  // Rank 4 is alive (its listener accepts) but does not take part until the others are done.
  std::vector<Result<Decision>> got(5, Result<Decision>(Status(Code::kInternal, "not run")));
  std::vector<std::unique_ptr<AgreementPort>> ports;
  for (int r = 0; r < 5; ++r) ports.push_back(r == 1 ? nullptr : std::make_unique<AgreementPort>(rs.fds[r]));
  std::vector<std::thread> ts;
  for (int r : {0, 2, 3}) ts.emplace_back([&, r] { got[r] = ports[r]->agree(rs.ctx(r, 1.0)); });
  for (auto& t : ts) t.join();
  for (int r : {0, 2, 3}) {
    REQUIRE(got[r].ok());
    CHECK(got[r].value().failed == std::vector<int>{1, 4});
    CHECK(got[r].value().ballot == got[0].value().ballot);
    CHECK(got[r].value().store == got[0].value().store);
    CHECK(got[r].value().prefix == got[0].value().prefix);
  }
  CHECK(got[0].value().ballot.rank == 0);
  CHECK(static_cast<bool>(ports[0]->store_server()));
  got[4] = ports[4]->agree(rs.ctx(4, 1.0));  // late: it learns the decision, and that it is out
  CHECK(got[4].status().code() == Code::kAborted);
  CHECK(got[4].status().message().find("excluded") != std::string::npos);
}

TEST_CASE("agreement: the coordinator's death hands the round to the next rank") {
  Ranks rs(3);
  std::vector<std::unique_ptr<AgreementPort>> ports;
  for (int r = 0; r < 3; ++r) ports.push_back(std::make_unique<AgreementPort>(rs.fds[r]));
  ports[0].reset();  // rank 0 (the would-be coordinator) is gone before anyone asks it
  std::vector<Result<Decision>> got(3, Result<Decision>(Status(Code::kInternal, "not run")));
  std::thread a([&] { got[1] = ports[1]->agree(rs.ctx(1, 1.0)); });
  std::thread b([&] { got[2] = ports[2]->agree(rs.ctx(2, 1.0)); });
  a.join();
  b.join();
  REQUIRE(got[1].ok());
  REQUIRE(got[2].ok());
  CHECK(got[1].value().failed == std::vector<int>{0});
  CHECK(got[1].value().ballot == got[2].value().ballot);
  CHECK(got[1].value().ballot.rank == 1);
}

TEST_CASE("agreement: ranks excluded up front are never asked, and one that asks is refused") {
  // Rank 0 is alive and excluded by the others (shrink_excluding). It runs an agreement of its
  // own without the list, so it would coordinate (the lowest rank): its PREPAREs are refused, and
  // it ends up learning the others' decision, which excludes it. The others do not wait for it:
  // with a 5 s timeout per request they decide long before one would expire.
  Ranks rs(4);
  std::vector<std::unique_ptr<AgreementPort>> ports;
  for (int r = 0; r < 4; ++r) ports.push_back(std::make_unique<AgreementPort>(rs.fds[r]));
  std::vector<Result<Decision>> got(4, Result<Decision>(Status(Code::kInternal, "not run")));
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> ts;
  for (int r : {1, 2, 3})
    ts.emplace_back([&, r] {
      auto c = rs.ctx(r, 5.0);
      c.excluded = {0};
      got[r] = ports[r]->agree(c);
    });
  for (auto& t : ts) t.join();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int r : {1, 2, 3}) {
    REQUIRE(got[r].ok());
    CHECK(got[r].value().failed == std::vector<int>{0});
    CHECK(got[r].value().ballot.rank == 1);
  }
  CHECK(took < 4.0);
  got[0] = ports[0]->agree(rs.ctx(0, 1.0));
  CHECK(got[0].status().code() == Code::kAborted);
}
