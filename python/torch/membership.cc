// Membership check before uccl's rendezvous (see membership.h for the why and the keys).
#include "membership.h"

#include "uccl/uccl.h"  // UCCL_VERSION_*

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace uccl_torch {

namespace {

constexpr char kSizeKey[] = "uccl/torch/size";
constexpr char kBadKey[] = "uccl/torch/bad";
std::string claim_key(int r) { return "uccl/torch/claim/" + std::to_string(r); }
std::string who_key(int r) { return "uccl/torch/who/" + std::to_string(r); }

std::vector<uint8_t> bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }
std::string text(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

std::string identity() {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  return "pid " + std::to_string(getpid()) + " on " + host;
}

// The failure every waiting member reads: "<peer>\n<message>".
uccl::Status publish_bad(c10d::Store& store, uccl::Status s) {
  store.compareSet(kBadKey, {}, bytes(std::to_string(s.peer()) + "\n" + s.message()));
  return s;
}

uccl::Status read_bad(c10d::Store& store, int rank) {
  std::string v = text(store.get(kBadKey));
  auto nl = v.find('\n');
  int peer = nl == std::string::npos ? -1 : std::atoi(v.substr(0, nl).c_str());
  std::string why = nl == std::string::npos ? v : v.substr(nl + 1);
  return uccl::Status(uccl::Code::kInvalidArgument,
                      "the group's configuration is inconsistent (seen by another member; this is rank " +
                          std::to_string(rank) + "): " + why,
                      peer);
}

uccl::Status check(c10d::Store& store, int rank, int size, double timeout_s) {
  const std::string me = identity();
  // One world size and one uccl version: the first process's answer stands, with who gave it.
  const std::string version = std::to_string(UCCL_VERSION_MAJOR) + "." + std::to_string(UCCL_VERSION_MINOR) + "." +
                              std::to_string(UCCL_VERSION_PATCH);
  const std::string mine = std::to_string(size) + ":" + std::to_string(rank) + ":" + version;
  std::string first = text(store.compareSet(kSizeKey, {}, bytes(mine)));
  if (first != mine) {
    // "size:rank:version"
    auto c1 = first.find(':');
    auto c2 = c1 == std::string::npos ? c1 : first.find(':', c1 + 1);
    int their_size = std::atoi(first.substr(0, c1).c_str());
    int their_rank = c1 == std::string::npos ? -1 : std::atoi(first.substr(c1 + 1, c2 - c1 - 1).c_str());
    std::string their_version = c2 == std::string::npos ? "unknown" : first.substr(c2 + 1);
    if (their_version != version) {
      return publish_bad(store, uccl::Status(uccl::Code::kInvalidArgument,
                                             "uccl versions differ: rank " + std::to_string(rank) + " (" + me +
                                                 ") runs uccl " + version + ", rank " + std::to_string(their_rank) +
                                                 " runs uccl " + their_version,
                                             their_rank));
    }
    if (their_size != size) {
      return publish_bad(store, uccl::Status(uccl::Code::kInvalidArgument,
                                             "world sizes differ: rank " + std::to_string(rank) + " (" + me +
                                                 ") was configured with world size " + std::to_string(size) +
                                                 ", rank " + std::to_string(their_rank) + " with world size " +
                                                 std::to_string(their_size),
                                             their_rank));
    }
  }
  // One process per rank.
  int64_t n = store.add(claim_key(rank), 1);
  std::string owner = text(store.compareSet(who_key(rank), {}, bytes(me)));
  if (n > 1) {
    return publish_bad(store, uccl::Status(uccl::Code::kInvalidArgument,
                                           "rank " + std::to_string(rank) + " is claimed by two processes (" + owner +
                                               " and " + me + "); every rank of a group needs its own process "
                                               "(a reused store prefix reads the same)",
                                           rank));
  }
  // Everyone, or the first failure anyone saw, or the deadline.
  std::vector<std::string> all;
  for (int r = 0; r < size; ++r) all.push_back(claim_key(r));
  auto limit = timeout_s < 0 ? store.getTimeout()
                             : std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000.0));
  auto deadline = std::chrono::steady_clock::now() + limit;
  auto nap = std::chrono::milliseconds(1);
  while (true) {
    if (store.check({kBadKey})) return read_bad(store, rank);
    if (store.check(all)) return uccl::Status::Ok();
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::milliseconds(50));
  }
  std::string missing;
  int first_missing = -1;
  for (int r = 0; r < size; ++r) {
    if (store.check({claim_key(r)})) continue;
    if (first_missing < 0) first_missing = r;
    missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  }
  return uccl::Status(uccl::Code::kTimeout,
                      "rank(s) " + missing + " of a group of " + std::to_string(size) + " did not join within " +
                          std::to_string(limit.count() / 1000.0) + " s (rank " + std::to_string(rank) + " waited)",
                      first_missing);
}

}  // namespace

uccl::Status check_membership(c10d::Store& store, int rank, int size, double timeout_s) {
  if (size == 1) return uccl::Status::Ok();  // nobody to disagree with
  try {
    return check(store, rank, size, timeout_s);
  } catch (const std::exception& e) {
    auto* ce = dynamic_cast<const c10::Error*>(&e);
    return uccl::Status(uccl::Code::kRemoteError,
                        std::string("membership check on the group's store failed: ") +
                            (ce ? ce->what_without_backtrace() : e.what()));
  }
}

}  // namespace uccl_torch
