// Sockets and interfaces: the UCCL_SOCKET_IFNAME matrix, address parsing/printing, interface
// listing, listen/connect over IPv4 and IPv6 loopback, deadlines on recv_all and connect_to, and the Dialer that steps it.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>

#include "test_util.h"
#include "base/net.h"

using namespace uccl;

TEST_CASE("UCCL_SOCKET_IFNAME matching") {
  struct Case {
    const char* spec;
    const char* name;
    bool match;
  } cases[] = {
      {"", "eth0", true},          // empty = no restriction
      {"eth", "eth0", true},       // prefix
      {"eth", "eth10", true},
      {"eth", "ens3", false},
      {"eth,ib", "ib0", true},     // list
      {"eth, ib", "ib0", true},    // blanks around items are ignored
      {"eth,ib", "lo", false},
      {"^docker,lo", "docker0", false},  // exclude
      {"^docker,lo", "lo", false},
      {"^docker,lo", "eth0", true},
      {"=eth0", "eth0", true},     // exact
      {"=eth0", "eth01", false},
      {"=eth0,ib0", "ib0", true},
      {"=eth0,ib0", "ib", false},
      {"^=eth0", "eth0", false},   // exact exclude
      {"^=eth0", "eth01", true},
      {"^=eth0", "ib0", true},
      {"^", "eth0", true},         // exclude nothing
      {"=eth0,=eth1", "eth1", true},   // rail entries joined: each keeps its own '='
      {"=eth0,=eth1", "eth10", false},
      {"eth0,=eth1", "eth01", true},
  };
  for (auto& c : cases) {
    bool got = ifname_matches(c.spec, c.name);
    if (got != c.match) std::fprintf(stderr, "spec '%s' name '%s': got %d\n", c.spec, c.name, got);
    CHECK(got == c.match);
  }
}

TEST_CASE("address parsing and printing") {
  auto a = parse_address("10.0.0.2", 41234);
  REQUIRE((a.ok() && a.value().family() == AF_INET));
  CHECK(a.value().to_string() == "10.0.0.2:41234");
  auto b = parse_address("10.0.0.2:80", 41234);  // a port in the text wins
  REQUIRE((b.ok() && b.value().port() == 80));
  auto c = parse_address("fd00::2", 41234);
  REQUIRE((c.ok() && c.value().family() == AF_INET6));
  CHECK(c.value().to_string() == "[fd00::2]:41234");
  auto d = parse_address("[::1]:5000", 0);
  REQUIRE((d.ok() && d.value().family() == AF_INET6 && d.value().port() == 5000));
  CHECK(d.value().to_string() == "[::1]:5000");
  auto e = parse_address("localhost", 7);
  REQUIRE((e.ok() && e.value().port() == 7));
  CHECK(!parse_address("[::1", 1).ok());
  CHECK(!parse_address("1.2.3.4:99999", 1).ok());
  CHECK(!parse_address("no-such-host.invalid", 1).ok());
  SockAddr s = a.value();
  s.set_port(9);
  CHECK(s.port() == 9);
}

TEST_CASE("interface listing and selection") {
  auto all = list_interfaces();
  REQUIRE(!all.empty());
  bool have_lo = false;
  for (auto& ni : all) {
    CHECK(ni.addr.port() == 0);
    have_lo |= ni.loopback;
    std::printf("  %s %s%s%s speed %.1f Gb/s\n", ni.name.c_str(), ni.addr.to_string().c_str(), ni.up ? " up" : "",
                ni.loopback ? " loopback" : "", ni.speed_gbps);
  }
  REQUIRE(have_lo);
  auto def = select_interfaces("", "");
  REQUIRE(!def.empty());  // falls back to loopback at worst
  bool all_lo = true;
  for (auto& ni : def) all_lo &= ni.loopback;
  for (auto& ni : def) CHECK((ni.up && (all_lo || !ni.loopback) && ni.name.compare(0, 6, "docker") != 0));
  auto lo = select_interfaces("=lo", "AF_INET");
  REQUIRE((!lo.empty() && lo[0].loopback && lo[0].addr.family() == AF_INET));
  CHECK(select_interfaces("=no_such_if0", "").empty());
  for (auto& ni : select_interfaces("", "AF_INET6")) CHECK(ni.addr.family() == AF_INET6);
}

static void test_loopback(const char* host) {
  auto addr = parse_address(host, 0);
  REQUIRE(addr.ok());
  SockAddr a = addr.value();
  auto lfd = listen_on(&a);
  REQUIRE_OK(lfd.status());
  CHECK(a.port() != 0);
  auto cfd = connect_to(a, now_s() + 5);
  REQUIRE_OK(cfd.status());
  int sfd = accept(lfd.value(), nullptr, nullptr);
  REQUIRE(sfd >= 0);
  // A payload larger than the socket buffers, sent from another thread.
  std::string big(8 << 20, 'x');
  for (size_t i = 0; i < big.size(); i += 4093) big[i] = static_cast<char>(i);
  std::thread t([&] { CHECK_OK(send_all(cfd.value(), big.data(), big.size(), now_s() + 10)); });
  std::string got(big.size(), 0);
  REQUIRE_OK(recv_all(sfd, &got[0], got.size(), now_s() + 10));
  t.join();
  CHECK(got == big);

  // Deadline: nothing arrives.
  char buf[4];
  double t0 = now_s();
  Status st = recv_all(sfd, buf, sizeof buf, now_s() + 0.2);
  double dt = now_s() - t0;
  CHECK(st.code() == Code::kTimeout);
  CHECK((dt >= 0.15 && dt < 5));
  // Peer close: kRemoteError with the byte count in the message.
  REQUIRE_OK(send_all(cfd.value(), "ab", 2, now_s() + 1));
  close(cfd.value());
  st = recv_all(sfd, buf, sizeof buf, now_s() + 5);
  CHECK(st.code() == Code::kRemoteError);
  CHECK(st.message().find("2 of 4") != std::string::npos);
  close(sfd);
  close(lfd.value());
}

// A loopback address nothing listens on: a port bound, listened on and closed (connecting to it
// is refused until someone listens there again).
static SockAddr closed_port() {
  auto addr = parse_address("127.0.0.1", 0);
  SockAddr a = addr.value();
  auto lfd = listen_on(&a);
  REQUIRE_OK(lfd.status());
  close(lfd.value());
  return a;
}

TEST_CASE("connect_to: deadline, and a listener that appears late") {
  // Connecting to a closed port is refused and retried until the deadline.
  const SockAddr a = closed_port();
  double t0 = now_s();
  auto c = connect_to(a, now_s() + 0.3);
  double dt = now_s() - t0;
  CHECK((!c.ok() && c.status().code() == Code::kTimeout));
  CHECK((dt >= 0.25 && dt < 5));
  // A short refusal window: the refusal is reported at once (one try), flagged as a refusal.
  bool refused = false;
  t0 = now_s();
  auto quick = connect_to(a, now_s() + 5, now_s(), &refused);
  dt = now_s() - t0;
  CHECK((!quick.ok() && quick.status().code() == Code::kTimeout));
  CHECK(refused);
  CHECK(dt < 1.0);  // not the 5 s deadline
  // A listener that appears late is still reached.
  std::thread late([&] {
    uccl_test::run_guarded([&] {
      usleep(200 * 1000);
      SockAddr b = a;
      auto l2 = listen_on(&b);
      REQUIRE_OK(l2.status());
      int s = accept(l2.value(), nullptr, nullptr);
      REQUIRE(s >= 0);
      close(s);
      close(l2.value());
    });
  });
  auto c2 = connect_to(a, now_s() + 5);
  REQUIRE_OK(c2.status());
  close(c2.value());
  late.join();
}

TEST_CASE("Dialer: connect_to in steps that never block") {
  // Nothing listens at first (refusals, retried with backoff); a listener appears after 200 ms.
  const SockAddr a = closed_port();
  Dialer d(a, now_s() + 5);
  int listener = -1;
  const double t0 = now_s();
  double longest = 0;
  int steps = 0;
  Dialer::State st = Dialer::State::kPending;
  while (st == Dialer::State::kPending && now_s() - t0 < 5) {
    if (listener < 0 && now_s() - t0 > 0.2) {
      SockAddr b = a;
      auto l2 = listen_on(&b);
      REQUIRE_OK(l2.status());
      listener = l2.value();
    }
    const double s0 = now_s();
    st = d.step();
    longest = std::max(longest, now_s() - s0);
    ++steps;
    usleep(1000);
  }
  REQUIRE(st == Dialer::State::kConnected);
  CHECK(now_s() - t0 >= 0.2);
  CHECK(steps > 20);        // it was pending between the steps, not blocked inside one
  CHECK(longest < 0.05);    // (a step is a syscall or two)
  CHECK(!d.refused());
  const int fd = d.take();
  CHECK(fd >= 0);
  CHECK(d.fd() == -1);
  close(fd);
  // A refusal with a short window fails at once, named and flagged; an untaken socket is closed.
  close(listener);
  Dialer quick(a, now_s() + 5, now_s());
  while ((st = quick.step()) == Dialer::State::kPending) quick.wait();
  CHECK(st == Dialer::State::kFailed);
  CHECK(quick.refused());
  CHECK(quick.error().code() == Code::kTimeout);
  CHECK(quick.error().message().find(a.to_string()) != std::string::npos);
}

TEST_CASE("listen, connect, send and receive over IPv4 loopback") { test_loopback("127.0.0.1"); }

TEST_CASE("listen, connect, send and receive over IPv6 loopback") {
  bool have_v6 = false;
  for (auto& ni : list_interfaces()) have_v6 |= ni.loopback && ni.addr.family() == AF_INET6;
  if (have_v6) test_loopback("::1");
  else MESSAGE("no IPv6 loopback: skipping ::1");
}

TEST_CASE("UCCL_SOCKET_IFNAME per-local-rank lists pick the rail's entry") {
  std::string why;
  CHECK(rail_ifname_spec("eth", 3, &why) == "eth");
  CHECK(why.empty());
  CHECK(rail_ifname_spec("=eth0;=eth1", 0, &why) == "=eth0");
  CHECK(rail_ifname_spec("=eth0;=eth1", 1, &why) == "=eth1");
  CHECK(why == "UCCL_SOCKET_IFNAME entry 1 of 2 for local rank 1");
  CHECK(rail_ifname_spec("=eth0;=eth1", 3) == "=eth1");  // wraps around
  CHECK(rail_ifname_spec("=eth0;;=eth1;", 2) == "=eth0");  // empty entries ignored
  CHECK(rail_ifname_spec("=eth0;=eth1", -1, &why) == "=eth0,=eth1");
  CHECK(why.find("unknown") != std::string::npos);
  CHECK(rail_ifname_spec("=mlx5_0;=mlx5_1", 1, &why, "UCCL_IB_HCA") == "=mlx5_1");  // the same lists
  CHECK(why == "UCCL_IB_HCA entry 1 of 2 for local rank 1");
}
