// The active side of connection setup: choosing a path to a peer, dialing its sockets in steps
// that never block the engine (base/net.h Dialer), sending the hellos, and falling back to the
// next path or lane when a host does not answer (see connection_manager.h). The passive side is
// connection_accept.cc.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "base/log.h"
#include "base/net.h"
#include "core/connection_manager.h"
#include "core/connection_state.h"
#include "transports/registry.h"

namespace uccl {
namespace {

// Hosts (an address without its port) that did not answer a connect within its window (a
// timeout, not a refusal: a dead link or NIC, a black-holed route), remembered process-wide
// for kUnansweredMemoryS. Every communicator of a process dials the same hosts (a trainer's
// TP/PP/DP groups, each split), and each would otherwise hold its engine for the whole connect
// window on that lane again before falling back.
constexpr double kUnansweredMemoryS = 60;
std::mutex g_unanswered_mu;
std::map<std::string, double> g_unanswered;  // host -> when it last did not answer

std::string host_part(const std::string& address) { return address.substr(0, address.rfind(':')); }

void note_unanswered(const std::string& address) {
  std::lock_guard<std::mutex> lock(g_unanswered_mu);
  g_unanswered[host_part(address)] = now_s();
}

// Seconds since `address`'s host last did not answer, or -1 (never, or long enough ago).
double unanswered_ago(const std::string& address) {
  std::lock_guard<std::mutex> lock(g_unanswered_mu);
  auto it = g_unanswered.find(host_part(address));
  if (it == g_unanswered.end()) return -1;
  const double ago = now_s() - it->second;
  return ago < kUnansweredMemoryS ? ago : -1;
}

}  // namespace

Status ConnectionManager::start_connect(int peer) {
  // A short lookup: if the peer has not created the communicator yet, try again later.
  auto info = peer_info(peer, 0.05);
  if (!info.ok()) return info.status().code() == Code::kTimeout ? Status::Ok() : info.status();
  // Ranks that differ in a job-wide setting would run different schedules: refuse the pair
  // before either sends a byte (the peer learns why from the failure notice).
  const std::string diff = settings_difference(me_, *info.value());
  if (!diff.empty())
    return Status(Code::kMismatch,
                  "connecting to " + peer_context(peer).describe() + ": " + diff +
                      "; settings that decide what the ranks exchange must be the same on every rank "
                      "(python -m uccl.info marks them 'job-wide')",
                  peer);
  auto paths = paths_to(*info.value());
  if (!paths.ok()) return paths.status().with_context("connecting to " + peer_context(peer).describe());
  // Walk the candidates from where the last attempt stopped: a transport that answered
  // kNotSupported (here, or in the peer's accept) is a normal answer, and the next one is tried.
  for (size_t& i = next_path_[peer]; i < paths.value().size(); ++i) {
    const PathChoice& path = paths.value()[i];
    Transport* t = transport(path.kind);
    if (!t) {
      note_fallback(peer, path.name + " is not built here");
      continue;
    }
    PeerContext ctx = transport_context(peer, *t, /*striped=*/true);
    auto pending = t->start_connect(ctx);
    if (!pending.ok() && pending.status().code() == Code::kNotSupported) {
      note_fallback(peer, path.name + " refused here: " + pending.status().message());
      continue;
    }
    if (!pending.ok()) return pending.status().with_context("connecting to " + ctx.describe());
    return dial(peer, path, t, std::unique_ptr<PendingConnect>(pending.value()));
  }
  return Status(Code::kNotSupported,
                "no transport could connect to " + peer_context(peer).describe() + ": " + fallback_notes_[peer], peer);
}

Status ConnectionManager::dial(int peer, const PathChoice& path, Transport* t, std::unique_ptr<PendingConnect> pending) {
  auto out = std::make_unique<Outgoing>();
  out->peer = peer;
  out->kind = path.kind;
  out->pending = std::move(pending);
  out->dialing = std::make_unique<Dialing>();
  Dialing& d = *out->dialing;
  d.transport = t;
  d.path_name = path.name;
  d.last = Status(Code::kRemoteError, peer_context(peer).describe() + " publishes no address");
  // Each attempt lists the address of every socket's lane: first, with several common networks,
  // the peer's address on each (striping); then each of the peer's addresses alone, those on a
  // network we share first (the cluster fabric before a routed path), so a lane that does not
  // connect falls back to one network.
  if (t->stripes_over_networks()) {
    std::vector<std::string> lanes;
    for (const StripeLane& l : pair_lanes(me_, *peer_infos_.at(peer))) lanes.push_back(l.peer_address);
    d.striping = d.pending_striped = !lanes.empty();
    for (const std::string& a : lanes) {
      const double ago = unanswered_ago(a);
      if (ago < 0) continue;
      if (unanswered_since_[peer] == 0)  // (said once, not on every try again)
        note_fallback(peer, "striping skipped: " + host_part(a) + " did not answer a connect " +
                              std::to_string(static_cast<int>(ago + 0.5)) + " s ago", /*one_network=*/true);
      d.striping = false;
      break;
    }
    if (d.striping) d.attempts.push_back(lanes);
  }
  // One address at a time; those that did not answer lately last.
  const size_t singles = d.attempts.size();
  for (const std::string& a : path.peer_addresses) d.attempts.push_back({a});
  std::stable_partition(d.attempts.begin() + singles, d.attempts.end(),
                        [](const std::vector<std::string>& a) { return unanswered_ago(a[0]) < 0; });
  out->nchannels =
      std::max<int>(t->sockets_per_connection(), d.attempts.empty() ? 1 : static_cast<int>(d.attempts[0].size()));
  outgoing_[peer] = std::move(out);
  return Status::Ok();
}

ConnectionManager::DialStep ConnectionManager::advance_dial(Outgoing& o, Status* failed) {
  Dialing& d = *o.dialing;
  // Every socket of an attempt is opened before any hello is sent: the peer assembles a
  // connection from the hellos, and one half-announced by an attempt that then failed would
  // hold the place of the next.
  while (d.attempt < d.attempts.size()) {
    const std::vector<std::string>& attempt = d.attempts[d.attempt];
    const std::string& address = attempt[d.fds.size() % attempt.size()];
    Status s;
    if (!d.socket) {
      // The peer listens before it publishes its address, so a refusal means it is gone: retry
      // only briefly (a full accept backlog). Once one address refused for that long, the others
      // get one try each against a refusal (an address that does not answer at all still gets
      // the window: another network's route).
      auto addr = parse_address(address, 0);
      if (addr.ok())
        d.socket = std::make_unique<Dialer>(addr.value(), now_s() + std::min(timeout_s_, 2.0),
                                            d.refused_before ? now_s() : -1);
      else
        s = addr.status();
    }
    if (d.socket) {
      const Dialer::State st = d.socket->step();
      if (st == Dialer::State::kPending) return DialStep::kDialing;
      if (st == Dialer::State::kConnected) {
        d.fds.push_back(d.socket->take());
        d.socket.reset();
        if (static_cast<int>(d.fds.size()) < o.nchannels) continue;
        o.fds.swap(d.fds);
        o.striped = d.striping && d.attempt == 0;
        return DialStep::kOpen;
      }
      const bool refused = d.socket->refused();
      d.refused_before = d.refused_before || refused;
      if (!refused) note_unanswered(address);
      s = Status(Code::kRemoteError,
                 "cannot connect: " + d.socket->error().message() + (refused ? " (has the peer exited?)" : ""), o.peer);
      d.socket.reset();
    }
    for (int fd : d.fds) ::close(fd);
    d.fds.clear();
    const std::string addr_text = attempt.size() == 1 ? attempt[0] : "its address on each common network";
    d.last = s.with_context("connecting to " + peer_context(o.peer).describe() + " at " + addr_text);
    if (d.striping && d.attempt == 0 && unanswered_since_[o.peer] == 0)  // a NIC the pair should share does not reach the peer
      note_fallback(o.peer, "striping over " + addr_text + " failed (" + s.message() + ")", /*one_network=*/true);
    ++d.attempt;
  }
  // No host answered at all (a lossy or congested network drops SYNs too): try again on a later
  // pass until the dead-link bound, instead of failing the peer after one window.
  if (!d.refused_before && !unanswered_too_long(o.peer)) {
    UCCL_INFO("rank %d -> rank %d: %s; trying again", rank_, o.peer, d.last.message().c_str());
    return DialStep::kRetryLater;
  }
  *failed = d.refused_before ? d.last
                             : Status(d.last.code(), d.last.message() + "; its host " + no_answer_text(o.peer), o.peer);
  return DialStep::kFailed;
}

Status ConnectionManager::open_outgoing(Outgoing& o) {
  std::unique_ptr<Dialing> d = std::move(o.dialing);
  PeerContext ctx = peer_context(o.peer);
  const int n = o.nchannels;
  o.deadline = now_s() + timeout_s_;
  unanswered_since_[o.peer] = 0;
  if (d->pending_striped && !o.striped) {  // one network after all: the transport must not weigh lanes
    auto plain = d->transport->start_connect(transport_context(o.peer, *d->transport, /*striped=*/false));
    if (!plain.ok()) return plain.status().with_context("connecting to " + ctx.describe());
    o.pending.reset(plain.value());
  }
  o.offer = o.pending->offer();
  o.staging = staging_offer_now();
  if (!keyed()) {  // keyed: each hello follows the peer's greeting (greet_outgoing)
    for (int ch = 0; ch < n; ++ch) {
      std::string msg;
      const HelloHeader h = connection_hello(o, ch);
      msg.assign(reinterpret_cast<const char*>(&h), sizeof h);
      if (ch == 0) msg += o.offer;
      Status s = send_all(o.fds[ch], msg.data(), msg.size(), now_s() + 10);
      if (!s.ok()) return s.with_context("connecting to " + ctx.describe());
    }
  }
  o.ack_read.assign(n, 0);
  o.acks.assign(n, AckHeader{});
  o.greetings.assign(n, Greeting{});
  o.greeting_read.assign(n, keyed() ? 0 : sizeof(Greeting));
  o.hellos.assign(n, HelloHeader{});
  o.ack_macs.assign(n, std::string(keyed() ? kMacBytes : 0, '\0'));
  UCCL_INFO("rank %d -> rank %d: connecting over %s (%d socket%s)", rank_, o.peer, d->path_name.c_str(), n,
            n > 1 ? "s" : "");
  return Status::Ok();
}

std::string ConnectionManager::connecting_text(const Outgoing& o) const {
  std::string s = "connecting over " + std::string(transport_name(o.kind));
  if (const Dialing* d = o.dialing.get()) {
    if (d->attempt < d->attempts.size()) {
      const std::vector<std::string>& a = d->attempts[d->attempt];
      s += ", opening socket " + std::to_string(d->fds.size() + 1) + " of " + std::to_string(o.nchannels) + " to " +
           a[d->fds.size() % a.size()] + " (attempt " + std::to_string(d->attempt + 1) + " of " +
           std::to_string(d->attempts.size()) + ")";
    }
    if (unanswered_since_[o.peer] > 0) s += "; its host " + no_answer_text(o.peer);
  } else {
    s += ", waiting for its acknowledgement";
  }
  return s;
}

HelloHeader ConnectionManager::connection_hello(const Outgoing& o, size_t ch) const {
  HelloHeader h = hello_to(o.peer, o.striped ? kHelloStriped : 0);  // keyed: a fresh nonce in h.secret
  h.transport = static_cast<uint8_t>(o.kind);
  h.channel = static_cast<uint32_t>(ch);
  h.nchannels = static_cast<uint32_t>(o.nchannels);
  h.offer_bytes = ch == 0 ? static_cast<uint32_t>(o.offer.size()) : 0;
  if (ch == 0) put_offer(&h, o.staging);
  return h;
}

bool ConnectionManager::progress_outgoing() {
  bool moved = false;
  const size_t mac_len = keyed() ? kMacBytes : 0;
  for (auto it = outgoing_.begin(); it != outgoing_.end();) {
    Outgoing& o = *it->second;
    if (o.dialing) {
      Status failed;
      const DialStep step = advance_dial(o, &failed);
      if (step == DialStep::kDialing) {
        ++it;
        continue;
      }
      moved = true;
      if (step == DialStep::kOpen) failed = open_outgoing(o);
      if (step == DialStep::kRetryLater) redial_at_[o.peer] = now_s() + 0.1;  // (a route that fails at once)
      if (step == DialStep::kRetryLater || !failed.ok()) {  // retry: endpoint() starts it again
        for (int fd : o.fds) ::close(fd);
        if (!failed.ok()) fail_peer(o.peer, failed);
        it = outgoing_.erase(it);
        continue;
      }
    }
    PeerContext ctx = peer_context(o.peer);
    bool greeted = true;
    Status err = keyed() ? greet_outgoing(o, &greeted, &moved) : Status::Ok();
    bool all_done = greeted;
    for (size_t ch = 0; ch < o.fds.size() && err.ok() && greeted; ++ch) {
      size_t& got = o.ack_read[ch];
      AckHeader& a = o.acks[ch];
      const size_t head = sizeof(AckHeader) + mac_len;
      // Read exactly the ack bytes: what follows on the socket belongs to the transport.
      while (err.ok()) {
        size_t want;
        char* dst;
        if (got < sizeof(AckHeader)) {
          want = sizeof(AckHeader) - got;
          dst = reinterpret_cast<char*>(&a) + got;
        } else {
          if (a.magic != kAckMagic) {
            err = Status(Code::kRemoteError, ctx.describe() + " answered the handshake with garbage", o.peer);
            break;
          }
          if (a.answer_bytes > kMaxOfferBytes) {
            err = Status(Code::kRemoteError, ctx.describe() + " sent an oversized handshake answer", o.peer);
            break;
          }
          if (got < head) {  // keyed: the ack's MAC
            want = head - got;
            dst = &o.ack_macs[ch][got - sizeof(AckHeader)];
          } else {
            size_t body = got - head;
            if (body == a.answer_bytes) break;
            if (ch == 0 || a.status != 0) {
              o.answer.resize(a.answer_bytes);
              want = a.answer_bytes - body;
              dst = &o.answer[body];
            } else {
              err = Status(Code::kRemoteError, ctx.describe() + " sent an answer on a secondary socket", o.peer);
              break;
            }
          }
        }
        ssize_t r = ::recv(o.fds[ch], dst, want, MSG_DONTWAIT);
        if (r > 0) {
          got += r;
          moved = true;
          continue;
        }
        if (r == 0 || errno == ECONNRESET)
          err = peer_closed_error(ctx, "during the handshake: socket " + std::to_string(ch) + " of " +
                                           std::to_string(o.fds.size()) + (r == 0 ? ", closed" : ", reset"));
        else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
          err = SystemError("handshake recv", errno).with_context("connecting to " + ctx.describe());
        break;
      }
      if (got < head || got - head < a.answer_bytes) {
        all_done = false;
        continue;
      }
      if (keyed() && err.ok() && a.status != static_cast<uint32_t>(Code::kUnauthenticated) &&
          !equal_ct(ack_mac(key_, o.greetings[ch].nonce, o.hellos[ch], a).data(), o.ack_macs[ch].data(), kMacBytes))
        err = Status(Code::kUnauthenticated,
                     ctx.describe() + " does not know this job's key (wrong MAC on its acknowledgement: another "
                                      "UCCL_JOB_KEY?); nothing was sent to it",
                     o.peer);
      if (a.status != 0 && err.ok())
        err = Status(static_cast<Code>(a.status), ctx.describe() + " refused the connection: " + o.answer, o.peer);
      if (err.ok() && !valid_staging_chunk(a.staging_chunk))
        err = Status(Code::kRemoteError,
                     ctx.describe() + " offered an invalid staging chunk of " + std::to_string(a.staging_chunk) +
                         " bytes (0, or a multiple of 64 from 4 KiB to 1 TiB)",
                     o.peer);
    }
    if (err.code() == Code::kNotSupported) {
      // The peer cannot take this transport: the next endpoint() call tries the next one.
      for (int fd : o.fds) ::close(fd);
      note_fallback(o.peer, std::string(transport_name(o.kind)) + " refused by rank " + std::to_string(o.peer) + ": " +
                                o.answer);
      ++next_path_[o.peer];
      it = outgoing_.erase(it);
      moved = true;
      continue;
    }
    if (err.ok() && !all_done && now_s() > o.deadline)
      err = Status(Code::kTimeout, ctx.describe() + " did not answer the connection handshake within the timeout (" +
                                        seconds_text(timeout_s_) + ")",
                   o.peer);
    if (!err.ok()) {
      for (int fd : o.fds) ::close(fd);
      fail_peer(o.peer, err);
      it = outgoing_.erase(it);
      continue;
    }
    if (all_done) {
      auto ep = o.pending->finish(o.answer, o.fds);
      if (!ep.ok()) {
        fail_peer(o.peer, ep.status().with_context("connecting to " + ctx.describe()));
      } else {
        endpoints_[o.peer].reset(wrap_staged(o.peer, ep.value(), o.staging, offer_of(o.acks[0])));
        UCCL_INFO("rank %d -> rank %d connected: %s", rank_, o.peer, ep.value()->describe().c_str());
      }
      moved = true;
      it = outgoing_.erase(it);
      continue;
    }
    ++it;
  }
  return moved;
}

}  // namespace uccl
