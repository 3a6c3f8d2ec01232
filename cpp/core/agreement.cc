// The agreement protocol (see core/agreement.h for the contract and the protocol).
#include "core/agreement.h"

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>

#include "base/config.h"
#include "base/log.h"
#include "base/net.h"
#include "base/thread_name.h"
#include "bootstrap/auth.h"
#include "uccl/tcp_store.h"

namespace uccl {

// One agreement (instance) of this communicator.
struct Instance {
  Ballot promised;
  uint64_t max_round = 0;
  bool decided = false;
  Decision decision;
};

struct AgreementPort::State {
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint32_t, Instance> inst;
  std::set<int> suspects;
  std::set<int> excluded;  // Context::excluded of the calls so far: suspects for good
  bool serving = false;
  std::atomic<bool> stop{false};
  std::shared_ptr<TcpStoreServer> store_server;
  std::string store_addr;
};

namespace {

// Kill points inside the agreement, for the tests (benchmarks/kill_points.py --shrink,
// tests/test_shrink.py): a coordinator that dies after a phase, or in the middle of its commits.
const TextSetting kAgreeKillPoint("core", "UCCL_AGREE_KILL_POINT", "",
                                  "testing: a coordinator SIGKILLs itself after its PREPARE or ACCEPT phase, or "
                                  "after committing to one rank (prepare, accept, commit)",
                                  one_of({"", "prepare", "accept", "commit"}));

void kill_point(const char* where) {
  if (kAgreeKillPoint.get() != where) return;
  UCCL_WARN("agreement: UCCL_AGREE_KILL_POINT=%s: killing this process", where);
  ::raise(SIGKILL);
}

// Reads one frame (header, body, MAC) from fd; the body length is checked before it is read.
Result<std::string> read_frame(int fd, double deadline) {
  AgreeHeader h{};
  UCCL_RETURN_IF_ERROR(recv_all(fd, &h, sizeof h, deadline));
  if (h.magic != kAgreeMagic || h.body_bytes > kMaxAgreeBody)
    return Status(Code::kRemoteError, "not an agreement message (bad magic or length)");
  std::string f(reinterpret_cast<const char*>(&h), sizeof h);
  f.resize(sizeof h + h.body_bytes + kMacBytes);
  UCCL_RETURN_IF_ERROR(recv_all(fd, &f[sizeof h], h.body_bytes + kMacBytes, deadline));
  return f;
}

const char* type_name(AgreeType t) {
  switch (t) {
    case AgreeType::kPrepare: return "PREPARE";
    case AgreeType::kAccept: return "ACCEPT";
    case AgreeType::kCommit: return "COMMIT";
    case AgreeType::kState: return "STATE";
    default: return "REPLY";
  }
}

std::string join_host_port(const std::string& ip, int port) {
  return (ip.find(':') != std::string::npos ? "[" + ip + "]" : ip) + ":" + std::to_string(port);
}

}  // namespace

AgreementPort::AgreementPort(int listen_fd) : fd_(listen_fd), st_(std::make_unique<State>()) {}

AgreementPort::~AgreementPort() {
  st_->stop = true;
  if (server_.joinable()) server_.join();
  if (fd_ >= 0) ::close(fd_);
}

std::shared_ptr<TcpStoreServer> AgreementPort::store_server() {
  std::lock_guard<std::mutex> lock(st_->mu);
  return st_->store_server;
}

void AgreementPort::serve(const Context& ctx) {
  name_this_thread("uccl-agreement");
  while (!st_->stop.load()) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    set_nonblocking(fd, false);
    handle(ctx, fd);
    ::close(fd);
  }
}

void AgreementPort::handle(const Context& ctx, int fd) {
  const double deadline = now_s() + std::min(2.0, ctx.timeout_s);
  auto frame = read_frame(fd, deadline);
  if (!frame.ok()) {
    UCCL_INFO("agreement: dropped a connection: %s", frame.status().message().c_str());
    return;
  }
  int from = -1;
  auto m = parse_agree_frame(ctx.key, ctx.comm_id, ctx.rank, ctx.size, frame.value(), &from);
  if (!m.ok() || m.value().type == AgreeType::kReply) {
    UCCL_WARN("agreement: refused a message: %s", m.ok() ? "a reply where a request belongs" : m.status().message().c_str());
    return;
  }
  const AgreeMsg& req = m.value();
  AgreeMsg r;
  r.type = AgreeType::kReply;
  {
    std::lock_guard<std::mutex> lock(st_->mu);
    State& st = *st_;
    Instance& s = st.inst[req.instance];
    // A rank the caller left out takes no part: its PREPARE, ACCEPT and COMMIT are refused (a
    // STATE still tells it the decision, which excludes it).
    const bool left_out = st.excluded.count(from) > 0 && req.type != AgreeType::kState;
    if (!left_out && req.type != AgreeType::kState && st.suspects.erase(from))
      UCCL_INFO("agreement: rank %d is alive after all (it sent %s)", from, type_name(req.type));
    if (!left_out) s.max_round = std::max(s.max_round, req.ballot.round);
    const bool not_lower = !(req.ballot < s.promised);
    switch (left_out ? AgreeType::kReply : req.type) {
      case AgreeType::kPrepare:
      case AgreeType::kAccept:
        r.ok = !s.decided && not_lower;
        if (r.ok) s.promised = req.ballot;
        break;
      case AgreeType::kCommit:
        if (s.decided) {
          r.ok = s.decision.ballot == req.decision.ballot;
        } else if (not_lower) {
          s.promised = req.ballot;
          s.decided = true;
          s.decision = req.decision;
          r.ok = true;
          UCCL_INFO("agreement: decided by COMMIT from rank %d: %s", from, s.decision.describe().c_str());
          st.cv.notify_all();
        }
        break;
      case AgreeType::kReply:  // left out: refused
        r.ok = false;
        break;
      default:
        r.ok = true;
        break;
    }
    r.ballot = req.ballot;
    r.instance = req.instance;
    r.promised = s.promised;
    r.has_decision = s.decided;
    r.decision = s.decision;
  }
  const std::string out = encode_agree_frame(ctx.key, ctx.comm_id, ctx.rank, from, r);
  send_all(fd, out.data(), out.size(), deadline);
}

namespace {

Result<AgreeMsg> rpc(const AgreementPort::Context& ctx, int peer, const AgreeMsg& m, double deadline) {
  if (peer < 0 || peer >= static_cast<int>(ctx.peers.size()) || ctx.peers[peer].empty())
    return Status(Code::kRemoteError, "rank " + std::to_string(peer) + " published no agreement address", peer);
  auto addr = parse_address(ctx.peers[peer], 0);
  if (!addr.ok()) return Status(Code::kRemoteError, addr.status().message(), peer);
  // A refused connection means the process is gone: retried only briefly (a full backlog). No
  // answer at all is as often a lost SYN (retried by TCP after 1 s, then 3 s) as a dead host: it
  // is waited for up to the dead-link bound, as a data connection's (a shorter window made the
  // rank across a lossy link a suspect, and the two sides decided apart).
  const double no_answer_s = kTcpDeadLinkS.get() > 0 ? kTcpDeadLinkS.get() : ctx.timeout_s;
  auto fd = connect_to(addr.value(), std::min(deadline, now_s() + no_answer_s), now_s() + 0.5);
  if (!fd.ok()) return Status(Code::kRemoteError, "rank " + std::to_string(peer) + " is unreachable: " + fd.status().message(), peer);
  const std::string out = encode_agree_frame(ctx.key, ctx.comm_id, ctx.rank, peer, m);
  Status s = send_all(fd.value(), out.data(), out.size(), deadline);
  Result<std::string> in = s.ok() ? read_frame(fd.value(), deadline) : Result<std::string>(s);
  ::close(fd.value());
  if (!in.ok()) return Status(in.status().code(), "rank " + std::to_string(peer) + ": " + in.status().message(), peer);
  int from = -1;
  auto r = parse_agree_frame(ctx.key, ctx.comm_id, ctx.rank, ctx.size, in.value(), &from);
  if (!r.ok()) return Status(r.status().code(), r.status().message(), peer);
  if (from != peer || r.value().type != AgreeType::kReply)
    return Status(Code::kRemoteError, "rank " + std::to_string(peer) + " sent an unexpected agreement reply", peer);
  return r;
}

}  // namespace

std::vector<Result<AgreeMsg>> AgreementPort::rpc_all(const Context& ctx, const std::vector<int>& to,
                                                     const AgreeMsg& m, double deadline) {
  std::vector<Result<AgreeMsg>> out(to.size(), Result<AgreeMsg>(Status(Code::kInternal, "not sent")));
  constexpr size_t kParallel = 64;  // one thread per request, this many at a time
  for (size_t base = 0; base < to.size(); base += kParallel) {
    std::vector<std::thread> ts;
    for (size_t i = base; i < std::min(to.size(), base + kParallel); ++i)
      ts.emplace_back([&, i] { out[i] = rpc(ctx, to[i], m, deadline); });
    for (auto& t : ts) t.join();
  }
  return out;
}

Status AgreementPort::coordinate(const Context& ctx) {
  State& st = *st_;
  Ballot b;
  std::set<int> suspects;
  std::unique_lock<std::mutex> first_lock(st.mu);
  Instance& s = st.inst[ctx.instance];
  first_lock.unlock();
  {
    std::lock_guard<std::mutex> lock(st.mu);
    if (s.decided) return Status::Ok();
    b = {std::max(s.max_round, s.promised.round) + 1, ctx.rank};
    s.max_round = b.round;
    s.promised = b;
    suspects = st.suspects;
  }
  auto suspect = [&](int p, const Status& why) {
    std::lock_guard<std::mutex> lock(st.mu);
    if (st.suspects.insert(p).second) UCCL_WARN("agreement: suspecting rank %d: %s", p, why.message().c_str());
  };
  // Commits a decision to its survivors (best effort), then records it here unless a higher
  // ballot was promised meanwhile (or adopted: another rank decided it already).
  auto commit = [&](const Decision& d, bool adopted) {
    std::vector<int> to;
    for (int p = 0; p < ctx.size; ++p)
      if (p != ctx.rank && !d.excludes(p)) to.push_back(p);
    AgreeMsg c;
    c.type = AgreeType::kCommit;
    c.ballot = b;
    c.has_decision = true;
    c.decision = d;
    c.instance = ctx.instance;
    if (kAgreeKillPoint.get() == "commit" && !to.empty()) {
      rpc_all(ctx, {to[0]}, c, now_s() + ctx.timeout_s);
      kill_point("commit");
    }
    rpc_all(ctx, to, c, now_s() + ctx.timeout_s);
    std::lock_guard<std::mutex> lock(st.mu);
    if (!s.decided && (adopted || !(b < s.promised))) {
      s.decided = true;
      s.decision = d;
      UCCL_INFO("agreement: decided as coordinator: %s", d.describe().c_str());
      st.cv.notify_all();
    }
  };
  // One phase: true when the round goes on; otherwise it adopted a decision or was preempted.
  auto phase = [&](AgreeType type, const std::vector<int>& to, const Decision* d, bool* missing) {
    AgreeMsg m;
    m.type = type;
    m.ballot = b;
    m.instance = ctx.instance;
    if (d) {
      m.has_decision = true;
      m.decision = *d;
    }
    auto replies = rpc_all(ctx, to, m, now_s() + ctx.timeout_s);
    bool preempted = false;
    for (size_t i = 0; i < to.size(); ++i) {
      if (!replies[i].ok()) {
        suspect(to[i], replies[i].status());
        *missing = true;
        continue;
      }
      const AgreeMsg& r = replies[i].value();
      if (r.has_decision) {
        commit(r.decision, true);
        return false;
      }
      if (!r.ok) preempted = true;
      std::lock_guard<std::mutex> lock(st.mu);
      s.max_round = std::max(s.max_round, r.promised.round);
    }
    return !preempted;
  };
  std::vector<int> to;
  for (int p = 0; p < ctx.size; ++p)
    if (p != ctx.rank && !suspects.count(p)) to.push_back(p);
  bool missing = false;
  if (!phase(AgreeType::kPrepare, to, nullptr, &missing)) return Status::Ok();
  kill_point("prepare");
  Decision d;
  {
    std::lock_guard<std::mutex> lock(st.mu);
    if (s.decided || !(s.promised == b)) return Status::Ok();
    for (int p = 0; p < ctx.rank; ++p)
      if (!st.suspects.count(p)) return Status::Ok();  // a lower rank spoke up: it coordinates
    d.failed.assign(st.suspects.begin(), st.suspects.end());
  }
  if (!st.store_server) {
    auto server = TcpStoreServer::start(ctx.my_ip, 0);
    if (!server.ok()) return server.status().with_context("shrink: serving the new communicator's store");
    std::lock_guard<std::mutex> lock(st.mu);
    st.store_server = std::shared_ptr<TcpStoreServer>(server.take());
    st.store_addr = join_host_port(ctx.my_ip, st.store_server->port());
  }
  d.ballot = b;
  d.store = st.store_addr;
  d.prefix = "uccl/shrink/" + std::to_string(ctx.instance) + "." + std::to_string(b.round) + "." + std::to_string(b.rank) + "/";
  to.clear();
  for (int p = 0; p < ctx.size; ++p)
    if (p != ctx.rank && !d.excludes(p)) to.push_back(p);
  missing = false;
  if (!phase(AgreeType::kAccept, to, &d, &missing) || missing) return Status::Ok();
  kill_point("accept");
  commit(d, false);
  return Status::Ok();
}

Result<Decision> AgreementPort::agree(const Context& ctx) {
  State& st = *st_;
  std::unique_lock<std::mutex> first_lock(st.mu);
  Instance& s = st.inst[ctx.instance];
  for (int p : ctx.excluded) {
    st.excluded.insert(p);
    st.suspects.insert(p);
  }
  if (!st.serving) {
    st.serving = true;
    server_ = std::thread([this, ctx] { serve(ctx); });
  }
  first_lock.unlock();
  const double budget = ctx.timeout_s * (3 + std::min(ctx.size, 8)) + 5, deadline = now_s() + budget;
  while (true) {
    int coordinator = ctx.rank;
    {
      std::unique_lock<std::mutex> lock(st.mu);
      if (s.decided) break;
      for (int p = 0; p < ctx.rank; ++p)
        if (!st.suspects.count(p)) {
          coordinator = p;
          break;
        }
    }
    if (now_s() > deadline)
      return Status(Code::kTimeout, "shrink: the survivors reached no agreement within " +
                                        std::to_string(static_cast<int>(budget)) + " s");
    if (coordinator == ctx.rank) {
      Status cs = coordinate(ctx);
      if (!cs.ok()) return cs;
      std::unique_lock<std::mutex> lock(st.mu);
      if (!s.decided) st.cv.wait_for(lock, std::chrono::milliseconds(10 + (ctx.rank % 7) * 3));
      continue;
    }
    AgreeMsg q;
    q.type = AgreeType::kState;
    q.instance = ctx.instance;
    auto r = rpc(ctx, coordinator, q, now_s() + ctx.timeout_s);
    std::unique_lock<std::mutex> lock(st.mu);
    if (!r.ok()) {
      if (st.suspects.insert(coordinator).second)
        UCCL_WARN("agreement: suspecting coordinator rank %d: %s", coordinator, r.status().message().c_str());
      continue;
    }
    if (r.value().has_decision && !s.decided) {
      s.decided = true;
      s.decision = r.value().decision;
      UCCL_INFO("agreement: learned the decision from rank %d: %s", coordinator, s.decision.describe().c_str());
    }
    if (!s.decided) st.cv.wait_for(lock, std::chrono::milliseconds(30));
  }
  std::lock_guard<std::mutex> lock(st.mu);
  if (s.decision.excludes(ctx.rank))
    return Status(Code::kAborted, "shrink: rank " + std::to_string(ctx.rank) +
                                      " was excluded by the survivors' agreement (it did not answer within the "
                                      "timeout; " + s.decision.describe() + ")");
  return s.decision;
}

}  // namespace uccl
