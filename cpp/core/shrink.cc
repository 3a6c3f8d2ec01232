// Communicator::shrink (after a failure: the survivors' new communicator, agreed by
// core/agreement.h), Communicator::grow and Communicator::join (ranks started later join a
// running job's new communicator through the store). Contracts in include/uccl/communicator.h.
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "base/config.h"
#include "base/log.h"
#include "base/net.h"
#include "bootstrap/auth.h"
#include "core/communicator_impl.h"
#include "core/handshake.h"
#include "transports/registry.h"
#include "uccl/tcp_store.h"

namespace uccl {
namespace {

// The new communicator's store on its rank 0 (the coordinator): a client of the server this
// process started, which it keeps alive as long as the communicator holds the store.
class ServedStore : public Store {
 public:
  ServedStore(std::shared_ptr<TcpStoreServer> server, std::shared_ptr<Store> client)
      : server_(std::move(server)), client_(std::move(client)) {}
  Status set(const std::string& k, const std::string& v) override { return client_->set(k, v); }
  Result<std::string> get(const std::string& k, double t) override { return client_->get(k, t); }
  Status wait(const std::vector<std::string>& keys, double t) override { return client_->wait(keys, t); }
  Result<int64_t> add(const std::string& k, int64_t d) override { return client_->add(k, d); }
  bool served_here() const override { return true; }

 private:
  std::shared_ptr<TcpStoreServer> server_;
  std::shared_ptr<Store> client_;
};

Result<std::shared_ptr<Store>> connect_decided_store(const std::string& addr, double timeout_s) {
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos) return Status(Code::kRemoteError, "shrink: bad store address '" + addr + "'");
  std::string host = addr.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  return connect_tcp_store(host, std::atoi(addr.c_str() + colon + 1), timeout_s);
}

// What must agree between the ranks of a grown communicator, one "name value" per line.
std::string fingerprint(const CommOptions& o) {
  std::ostringstream s;
#ifdef UCCL_VERSION
  s << "library " << UCCL_VERSION << '\n';
#endif
  s << "handshake-protocol " << kProtocolVersion << '\n' << "agreement-protocol " << kAgreeVersion << '\n';
  auto key = job_key();
  s << "job-key " << (key.ok() && !key.value().empty() ? "set" : "none") << '\n';
  s << "transport " << (o.transport.empty() || o.transport == "auto" ? kTransport.get() : o.transport) << '\n';
  s << "socket-family " << (kSocketFamily.get().empty() ? "any" : kSocketFamily.get()) << '\n';
  for (auto& [name, value] : job_wide_settings(o)) s << name << " = " << value << '\n';
  return s.str();
}

// "" when equal, else the first line that differs ("transport tcp here, transport auto there").
std::string first_difference(const std::string& mine, const std::string& theirs, const std::string& there) {
  std::istringstream a(mine), b(theirs);
  std::string la, lb;
  while (true) {
    const bool ha = static_cast<bool>(std::getline(a, la)), hb = static_cast<bool>(std::getline(b, lb));
    if (!ha && !hb) return "";
    if (la != lb || ha != hb)
      return "'" + (ha ? la : std::string("(nothing)")) + "' here, '" + (hb ? lb : std::string("(nothing)")) + "' " + there;
  }
}

bool plain_tag(const std::string& t) {
  if (t.empty() || t.size() > 128) return false;
  for (char c : t)
    if (c <= ' ' || c > '~' || c == '/') return false;
  return true;
}

double timeout_of(const CommOptions& o) { return o.timeout_s > 0 ? o.timeout_s : kTimeoutS.get(); }

}  // namespace

Result<std::shared_ptr<Communicator>> CommunicatorImpl::shrink(const CommOptions& opts) {
  return shrink_agreed(nullptr, opts);
}

Result<std::shared_ptr<Communicator>> CommunicatorImpl::shrink_excluding(const std::vector<int>& exclude,
                                                                         const CommOptions& opts) {
  std::vector<int> sorted = exclude;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    const int p = sorted[i];
    if (p < 0 || p >= size_)
      return InvalidArgument("shrink: rank " + std::to_string(p) + " to exclude is outside the communicator of size " +
                             std::to_string(size_));
    if (i > 0 && sorted[i - 1] == p) return InvalidArgument("shrink: rank " + std::to_string(p) + " is listed twice to exclude");
    if (p == rank_)
      return InvalidArgument("shrink: rank " + std::to_string(p) + " is this rank: an excluded rank does not call shrink");
  }
  return shrink_agreed(&sorted, opts);
}

Result<std::shared_ptr<Communicator>> CommunicatorImpl::shrink_agreed(const std::vector<int>* exclude,
                                                                      const CommOptions& opts) {
  if (!agree_) return Status(Code::kNotSupported, "shrink: this rank has no agreement listener (see the warning at creation)");
  ConnectionManager* conns = engine_->conns();
  AgreementPort::Context ctx;
  ctx.rank = rank_;
  ctx.size = size_;
  ctx.comm_id = conns->comm_id();
  ctx.key = conns->agreement_key();
  ctx.my_ip = conns->agreement_ip();
  ctx.timeout_s = engine_->timeout_s();
  // The peers' agreement addresses (cached with the topology, or fetched now while the store lives).
  auto topo = topology();
  if (!topo) return Status(Code::kRemoteError, "shrink: the peers' addresses are unknown (the store is gone and no "
                                               "collective had fetched them; see the warning above)");
  for (int p = 0; p < size_; ++p) ctx.peers.push_back(topo->peer(p).agree);
  if (exclude) ctx.excluded = *exclude;
  // Whatever was pending fails; peers still computing learn of the shrink through the closed connections.
  engine_->abort(Status(Code::kAborted, "shrink() called: the survivors form a new communicator"));
  // An instance whose coordinator (the new rank 0, serving the new store) died right after
  // deciding cannot be formed by anyone: the survivors then agree again, without it.
  for (uint32_t inst = next_shrink_instance_;; ++inst) {
    next_shrink_instance_ = inst + 1;
    ctx.instance = inst;
    auto d = agree_->agree(ctx);
    if (!d.ok()) return d.status();
    const Decision& dec = d.value();
    if (exclude && dec.failed != *exclude) {
      // The caller's new communicator is the ranks it did not list: another size would renumber
      // ranks behind its back. Every survivor got this decision, so every one stops here.
      int other = -1;
      for (int p : dec.failed)
        if (other < 0 && !std::binary_search(exclude->begin(), exclude->end(), p)) other = p;
      if (other >= 0)
        return Status(Code::kRemoteError, "shrink: rank " + std::to_string(other) + " failed too (" + dec.describe() +
                                              "), but the ranks to exclude did not name it; call again naming it",
                      other);
      return InvalidArgument("shrink: the survivors' agreement excluded other ranks than this rank's list (" +
                             dec.describe() + "): every survivor must name the same ranks to exclude");
    }
    int new_rank = 0, new_size = 0;
    for (int p = 0; p < size_; ++p) {
      if (dec.excludes(p)) continue;
      if (p == rank_) new_rank = new_size;
      ++new_size;
    }
    UCCL_INFO("shrink: %s; rank %d is rank %d of %d", dec.describe().c_str(), rank_, new_rank, new_size);
    const bool mine = dec.ballot.rank == rank_;
    Result<std::shared_ptr<Communicator>> c = Status(Code::kInternal, "not created");
    // The coordinator started the store before proposing: a refused connection means it is gone.
    auto client = connect_decided_store(dec.store, std::min(engine_->timeout_s(), 3.0));
    if (client.ok()) {
      std::shared_ptr<Store> store = client.value();
      if (mine) store = std::make_shared<ServedStore>(agree_->store_server(), store);
      c = Communicator::create(new_rank, new_size, std::make_shared<PrefixStore>(store, dec.prefix), merged(opts));
    } else {
      c = client.status();
    }
    if (!c.ok()) {
      const Status why = c.status().with_context("shrink: forming the survivors' communicator (its store " + dec.store +
                                                 " is served by rank " + std::to_string(dec.ballot.rank) + ")");
      const bool gone = why.code() == Code::kRemoteError || why.code() == Code::kTimeout;
      if (mine || !gone || inst + 1 >= static_cast<uint32_t>(size_)) return why;
      UCCL_WARN("%s; agreeing again without it", why.message().c_str());
      continue;
    }
    if (auto* impl = dynamic_cast<CommunicatorImpl*>(c.value().get())) impl->set_agreement(impl->agree_, agree_);
    return c;
  }
}

Result<std::shared_ptr<Communicator>> CommunicatorImpl::grow(int new_size, const std::string& tag,
                                                             const CommOptions& opts) {
  if (new_size < size_)
    return InvalidArgument("grow: new size " + std::to_string(new_size) + " is smaller than the current " + std::to_string(size_));
  if (!plain_tag(tag)) return InvalidArgument("grow: the tag must be 1-128 printable characters without '/' or spaces");
  const CommOptions o = merged(opts);
  const double timeout = engine_->timeout_s();
  const std::string g = "uccl/grow/" + tag + "/";
  const std::string mine = fingerprint(o);
  const int joiners = new_size - size_;
  if (rank_ == 0) {
    UCCL_RETURN_IF_ERROR(store_->set(g + "offer", "old " + std::to_string(size_) + "\nnew " + std::to_string(new_size) + "\n" + mine));
    std::string verdict = "ok";
    for (int j = 1; j <= joiners && verdict == "ok"; ++j) {
      auto theirs = store_->get(g + "joiner/" + std::to_string(j), timeout);
      if (!theirs.ok()) return theirs.status().with_context("grow: waiting for joiner " + std::to_string(j) + " of " + std::to_string(joiners));
      const std::string diff = first_difference(mine, theirs.value(), "on joiner " + std::to_string(j));
      if (!diff.empty()) verdict = "grow: joiner " + std::to_string(j) + " (rank " + std::to_string(size_ + j - 1) + ") does not match the running job: " + diff;
    }
    UCCL_RETURN_IF_ERROR(store_->set(g + "verdict", verdict));
  }
  auto verdict = store_->get(g + "verdict", timeout * 2);
  if (!verdict.ok()) return verdict.status().with_context("grow: waiting for rank 0's verdict on the joiners");
  if (verdict.value() != "ok") return Status(Code::kMismatch, verdict.value());
  return Communicator::create(rank_, new_size, std::make_shared<PrefixStore>(store_, g + "comm/"), o);
}

Result<std::shared_ptr<Communicator>> Communicator::join(std::shared_ptr<Store> store, const std::string& tag,
                                                         const CommOptions& opts) {
  if (!store) return InvalidArgument("join: a store is required");
  if (!plain_tag(tag)) return InvalidArgument("join: the tag must be 1-128 printable characters without '/' or spaces");
  UCCL_RETURN_IF_ERROR(config_status());
  const double timeout = timeout_of(opts);
  const std::string g = "uccl/grow/" + tag + "/";
  auto offer = store->get(g + "offer", timeout);
  if (!offer.ok()) return offer.status().with_context("join: waiting for the running job's grow('" + tag + "')");
  // "old <n>\nnew <N>\n" then the running job's fingerprint.
  const std::string& text = offer.value();
  const size_t l1 = text.find('\n'), l2 = l1 == std::string::npos ? l1 : text.find('\n', l1 + 1);
  int old_size = 0, new_size = 0;
  if (l2 == std::string::npos || std::sscanf(text.substr(0, l2).c_str(), "old %d\nnew %d", &old_size, &new_size) != 2 ||
      old_size < 1 || new_size < old_size)
    return Status(Code::kRemoteError, "join: malformed grow offer in the store");
  const std::string theirs = text.substr(l2 + 1);
  auto j = store->add(g + "joined", 1);
  if (!j.ok()) return j.status().with_context("join");
  if (j.value() > new_size - old_size)
    return InvalidArgument("join: the job grows from " + std::to_string(old_size) + " to " + std::to_string(new_size) +
                           " ranks; this is joiner " + std::to_string(j.value()) + ", one too many");
  const std::string mine = fingerprint(opts);
  UCCL_RETURN_IF_ERROR(store->set(g + "joiner/" + std::to_string(j.value()), mine));
  const std::string diff = first_difference(mine, theirs, "in the running job");
  if (!diff.empty()) return Status(Code::kMismatch, "join: this process does not match the running job: " + diff);
  auto verdict = store->get(g + "verdict", timeout * 2);
  if (!verdict.ok()) return verdict.status().with_context("join: waiting for the running job's verdict");
  if (verdict.value() != "ok") return Status(Code::kMismatch, verdict.value());
  const int rank = old_size + static_cast<int>(j.value()) - 1;
  return Communicator::create(rank, new_size, std::make_shared<PrefixStore>(store, g + "comm/"), opts);
}

}  // namespace uccl
