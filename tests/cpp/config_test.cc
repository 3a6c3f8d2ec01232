// The config machinery (base/config.h): parsers refuse what they do not understand, a refused
// environment value leaves the default in place and is reported naming the variable and what
// was expected, and Communicator::create refuses to start with it. Its own process: the
// environment is set before any variable is read.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "base/config.h"
#include "base/net.h"
#include "transports/registry.h"
#include "transports/shm/shm_transport.h"
#include "transports/tcp/tcp_transport.h"
#include "uccl/communicator.h"
#include "uccl/tcp_store.h"

using namespace uccl;

namespace {

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

template <class T>
std::string parse(const typename Setting<T>::Parser& p, const std::string& text, T* out) {
  return p(text, out);
}

}  // namespace

TEST_CASE("parsers take what they document and refuse the rest") {
  int i = 0;
  CHECK(parse<int>(int_in(1, 64), " 8 ", &i) == "");
  CHECK(i == 8);
  CHECK(parse<int>(int_in(1, 64), "abc", &i) == "an integer from 1 to 64");
  CHECK(parse<int>(int_in(1, 64), "0", &i) != "");
  CHECK(parse<int>(int_in(1, 64), "2.5", &i) != "");
  CHECK(parse<int>(int_in(1, 64), "", &i) != "");
  CHECK(parse<int>(int_in(-1, 255), "-1", &i) == "");
  size_t b = 0;
  CHECK(parse<size_t>(bytes_at_least(0), "4M", &b) == "");
  CHECK(b == 4u << 20);
  CHECK(parse<size_t>(bytes_at_least(0), "256k", &b) == "");
  CHECK(b == 256u << 10);
  CHECK(parse<size_t>(bytes_at_least(0), "1048576", &b) == "");
  CHECK(b == 1u << 20);
  CHECK(parse<size_t>(bytes_at_least(0), "12Q", &b) != "");
  CHECK(parse<size_t>(bytes_at_least(0), "-4K", &b) != "");
  // auto is 0 (the reader picks); anything else is a byte count, named with auto in the error.
  CHECK(parse<size_t>(bytes_or_auto(4096), " auto ", &b) == "");
  CHECK(b == 0);
  CHECK(parse<size_t>(bytes_or_auto(4096), "2M", &b) == "");
  CHECK(b == (2u << 20));
  CHECK(parse<size_t>(bytes_or_auto(4096), "1K", &b).find("auto or a byte count of at least 4096") == 0);
  CHECK(parse<size_t>(bytes_or_auto(4096), "0", &b) != "");
  CHECK(parse<size_t>(bytes_or_auto(4096), "Auto", &b) != "");
  CHECK(parse<size_t>(bytes_at_least(1), "0", &b) != "");
  bool f = true;
  CHECK(parse<bool>(boolean(), "off", &f) == "");
  CHECK(!f);
  CHECK(parse<bool>(boolean(), "TRUE", &f) == "");
  CHECK(f);
  CHECK(parse<bool>(boolean(), "maybe", &f) != "");
  double d = 0;
  CHECK(parse<double>(number_above(0), "1.5", &d) == "");
  CHECK(d == 1.5);
  CHECK(parse<double>(number_above(0), "0", &d) != "");
  CHECK(parse<double>(number_above(0), "1s", &d) != "");
  std::string s;
  CHECK(parse<std::string>(one_of({"", "AF_INET"}), "AF_INET", &s) == "");
  CHECK(contains(parse<std::string>(one_of({"", "AF_INET"}), "AF_UNIX", &s), "one of (empty), AF_INET"));
}

TEST_CASE("a refused value keeps the default and is named with what was expected") {
  // Set before anything reads these variables (environment_set, a static initializer).
  CHECK(kNsocksPerPeer.error().code() == Code::kInvalidArgument);
  CHECK(contains(kNsocksPerPeer.error().message(), "UCCL_NSOCKS_PERPEER='abc': expected an integer from 1 to 64"));
  CHECK(kNsocksPerPeer.get() == kNsocksPerPeer.default_value());
  CHECK(kNsocksPerPeer.get() == 2);
  CHECK(contains(kShmCmaMinBytes.error().message(), "UCCL_SHM_CMA_MIN_BYTES='12Q'"));
  CHECK(kShmCmaMinBytes.get() == 128u << 10);
  CHECK(contains(kSocketFamily.error().message(), "UCCL_SOCKET_FAMILY='AF_UNIX'"));
  // A valid value is taken.
  CHECK(kShmRingBytes.error().ok());
  CHECK(kShmRingBytes.get() == 1u << 20);
  // The defaults of option structs come from the declarations (written once).
  CHECK(ShmOptions().cma_min_bytes == kShmCmaMinBytes.default_value());
  CHECK(ShmOptions().ring_bytes == 4u << 20);
  // The table reports it; config_status() lists every refused variable.
  bool seen = false;
  for (auto& row : config_table())
    if (row.name == "UCCL_NSOCKS_PERPEER") {
      seen = true;
      CHECK(row.is_set);
      CHECK(row.value == "abc");
      CHECK(row.def == "2");
      CHECK(row.section == "tcp");
      CHECK(contains(row.error, "expected an integer"));
    }
  CHECK(seen);
  Status st = config_status();
  CHECK(st.code() == Code::kInvalidArgument);
  CHECK(contains(st.message(), "UCCL_NSOCKS_PERPEER"));
  CHECK(contains(st.message(), "UCCL_SHM_CMA_MIN_BYTES"));
  CHECK(contains(st.message(), "UCCL_SOCKET_FAMILY"));
}

TEST_CASE("Communicator::create refuses to start with a refused value") {
  auto server = TcpStoreServer::start("127.0.0.1", 0);
  REQUIRE(server.ok());
  auto store = connect_tcp_store("127.0.0.1", server.value()->port(), 10);
  REQUIRE(store.ok());
  auto comm = Communicator::create(0, 1, store.value());
  CHECK(comm.status().code() == Code::kInvalidArgument);
  CHECK(contains(comm.status().message(), "UCCL_NSOCKS_PERPEER='abc'"));
}

TEST_CASE("every declared variable has a valid default, a meaning and a section") {
  for (auto& row : config_table()) {
    INFO(row.name);
    CHECK(row.name.rfind("UCCL_", 0) == 0);
    CHECK(!row.meaning.empty());
    CHECK(!row.section.empty());
    if (!row.is_set) CHECK(row.error.empty());
  }
}

// Before any test (and before anything reads a variable: they are read at first use).
[[maybe_unused]] const bool environment_set = [] {
  setenv("UCCL_NSOCKS_PERPEER", "abc", 1);
  setenv("UCCL_SHM_CMA_MIN_BYTES", "12Q", 1);
  setenv("UCCL_SOCKET_FAMILY", "AF_UNIX", 1);
  setenv("UCCL_SHM_RING_BYTES", "1M", 1);
  return true;
}();
