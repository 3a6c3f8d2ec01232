// TcpStore: one server, several client threads; blocking get/wait answered by the server,
// atomic add, timeouts, binary values, garbage connections, and a server that goes away.
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "uccl/tcp_store.h"
#include "test_util.h"
#include "base/net.h"

using namespace uccl;

static std::shared_ptr<Store> client(int port) {
  auto c = connect_tcp_store("127.0.0.1", port, 5);
  REQUIRE_OK(c.status());
  return c.value();
}

TEST_CASE("TcpStore: set/get, blocking get and wait, add, timeouts, garbage, server loss") {
  auto server = TcpStoreServer::start("127.0.0.1", 0);
  REQUIRE_OK(server.status());
  int port = server.value()->port();
  CHECK(port > 0);

  // set / get, binary values (NUL bytes, all byte values), empty values.
  auto a = client(port);
  std::string bin;
  for (int i = 0; i < 256; ++i) bin.push_back(static_cast<char>(i));
  REQUIRE_OK(a->set("bin", bin));
  REQUIRE_OK(a->set("empty", ""));
  auto b = client(port);
  auto g = b->get("bin", 1);
  REQUIRE_OK(g.status());
  CHECK(g.value() == bin);
  CHECK(b->get("empty", 1).value().empty());
  std::string big(3 << 20, 'q');
  REQUIRE_OK(a->set("big", big));
  CHECK(b->get("big", 1).value() == big);

  // get blocks until another thread sets the key (server-side wake-up, no client polling).
  {
    double t0 = now_s();
    std::thread setter([&] {
      usleep(200 * 1000);
      CHECK_OK(a->set("late", "v"));
    });
    auto r = b->get("late", 10);
    double dt = now_s() - t0;
    REQUIRE_OK(r.status());
    CHECK(r.value() == "v");
    CHECK((dt >= 0.15 && dt < 5));
    setter.join();
  }

  // wait on several keys, set by different clients.
  {
    std::thread w([&] {
      auto c = client(port);
      CHECK_OK(c->wait({"k1", "k2", "k3"}, 10));
    });
    auto c1 = client(port), c2 = client(port);
    REQUIRE_OK(c1->set("k1", "1"));
    usleep(50 * 1000);
    REQUIRE_OK(c2->set("k2", "2"));
    REQUIRE_OK(c1->set("k3", "3"));
    w.join();
  }

  // add from many threads (some sharing one client) is atomic.
  {
    const int kThreads = 6, kAdds = 200;
    auto shared = client(port);
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t) {
      ts.emplace_back([&, t] {
        auto own = t % 2 ? client(port) : shared;
        for (int i = 0; i < kAdds; ++i) CHECK_OK(own->add("counter", 1).status());
      });
    }
    for (auto& t : ts) t.join();
    auto v = a->add("counter", 0);
    REQUIRE_OK(v.status());
    CHECK(v.value() == kThreads * kAdds);
    CHECK(a->get("counter", 1).value() == std::to_string(kThreads * kAdds));
    CHECK(a->add("counter", -5).value() == kThreads * kAdds - 5);
    CHECK(a->add("fresh", -3).value() == -3);
    CHECK(a->add("bin", 1).status().code() == Code::kRemoteError);  // not an integer
    REQUIRE_OK(a->set("after_error", "ok"));                          // the connection is still fine
  }

  // get timeout: kTimeout naming the key, promptly; the client stays usable.
  {
    double t0 = now_s();
    auto r = b->get("never", 0.2);
    double dt = now_s() - t0;
    CHECK(r.status().code() == Code::kTimeout);
    CHECK(r.status().message().find("never") != std::string::npos);
    CHECK((dt >= 0.15 && dt < 5));
    Status w = b->wait({"bin", "never2"}, 0.1);
    CHECK((w.code() == Code::kTimeout && w.message().find("never2") != std::string::npos));
    CHECK(b->get("bin", 0).value() == bin);  // timeout 0 on an existing key
  }

  // Garbage connections are dropped without disturbing others.
  {
    auto addr = parse_address("127.0.0.1", port);
    auto fd = connect_to(addr.value(), now_s() + 2);
    REQUIRE_OK(fd.status());
    const char junk[] = "GET / HTTP/1.1\r\n\r\n";
    REQUIRE_OK(send_all(fd.value(), junk, sizeof junk, now_s() + 1));
    char c;
    CHECK(recv_all(fd.value(), &c, 1, now_s() + 2).code() == Code::kRemoteError);  // server closed it
    close(fd.value());
    CHECK(b->get("bin", 1).value() == bin);
  }

  // served_here(): the server is in this process (through a prefix view too); it stops being
  // so once the server is gone.
  CHECK(a->served_here());
  CHECK(PrefixStore(a, "p/").served_here());

  // A client blocked in get when the server goes away gets kRemoteError, not a hang.
  {
    auto blocked = client(port);
    std::thread t([&] {
      auto r = blocked->get("never3", 30);
      CHECK(r.status().code() == Code::kRemoteError);
    });
    usleep(100 * 1000);
    double t0 = now_s();
    server.value().reset();  // joins the server thread, closes every connection
    t.join();
    CHECK(now_s() - t0 < 5);
    CHECK(a->set("x", "y").code() == Code::kRemoteError);
    CHECK(a->get("x", 1).status().code() == Code::kRemoteError);  // stays broken
    CHECK(!a->served_here());
  }

  // Connecting to no server times out after the given time.
  {
    double t0 = now_s();
    auto c = connect_tcp_store("127.0.0.1", port, 0.3);
    CHECK((!c.ok() && c.status().code() == Code::kTimeout));
    CHECK(now_s() - t0 < 5);
  }
}

// One client is shared by threads (the caller's thread waiting for a peer's key, the progress
// thread asking for a peer's address while connecting). A long wait must not hold the client
// for its whole timeout: before, the other thread's call waited behind it (the link probe's
// deadlock of 2026-11-27 was one case of this).
TEST_CASE("TcpStore: a long get or wait on a shared client lets other threads' calls through") {
  auto server = TcpStoreServer::start("127.0.0.1", 0);
  REQUIRE_OK(server.status());
  auto shared = client(server.value()->port());
  REQUIRE_OK(shared->set("there", "v"));
  for (int use_wait = 0; use_wait < 2; ++use_wait) {
    const double t0 = now_s();
    std::thread waiter([&] {
      Status s = use_wait ? shared->wait({"there", "never"}, 1.5) : shared->get("never", 1.5).status();
      CHECK(s.code() == Code::kTimeout);
      CHECK(s.message().find("never") != std::string::npos);
      const double dt = now_s() - t0;
      CHECK((dt >= 1.4 && dt < 3.0));  // the whole timeout, not one slice
    });
    usleep(100 * 1000);  // the waiter is inside its get/wait
    const double t1 = now_s();
    auto g = shared->get("there", 5);
    REQUIRE_OK(g.status());
    CHECK(g.value() == "v");
    CHECK_OK(shared->set("other", "w"));
    const double took = now_s() - t1;
    INFO("use_wait " << use_wait << ": the other thread's get+set took " << took << " s");
    CHECK(took < 0.5);
    waiter.join();
  }
  // A long get still wakes as soon as the key is set (server-side, within the slice).
  const double t0 = now_s();
  std::thread setter([&] {
    usleep(300 * 1000);
    auto c = client(server.value()->port());
    CHECK_OK(c->set("late2", "x"));
  });
  auto r = shared->get("late2", 10);
  REQUIRE_OK(r.status());
  CHECK(now_s() - t0 < 1.0);
  setter.join();
}
