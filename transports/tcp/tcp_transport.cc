// TcpTransport: connection setup for the tcp transport.
//
// The core has already connected and authenticated the sockets, so all that is left is a
// version check and whether the link is encrypted (tcp_tls.h): offer and answer are "tcp1" or
// "tcp1+tls". Nothing here blocks (the TLS handshake is driven by the endpoint's progress()). The socket count is
// whatever the core handed over (both sides see the same sockets in the same order); the
// receiver is driven by part headers, so the two sides need not even agree on striping.
#include "transports/tcp/tcp_transport.h"

#include <unistd.h>

#include "transports/tcp/tcp_endpoint.h"
#include "transports/tcp/tcp_tls.h"

namespace uccl {
namespace {

constexpr const char* kVersion = "tcp1";
constexpr const char* kTlsSuffix = "+tls";

// The offer/answer: "tcp1", or "tcp1+tls" for an encrypted link. The connecting side offers
// TLS when its UCCL_ENCRYPT wants it for the pair; the accepting side answers TLS when either
// side wants it, so that a pair is encrypted if one of its ranks asks (the safe side).
Status parse(const PeerContext& peer, const std::string& what, const std::string& got, bool* tls) {
  *tls = got == std::string(kVersion) + kTlsSuffix;
  if (got == kVersion || *tls) return Status::Ok();
  return Status(Code::kNotSupported,
                peer.describe() + " speaks tcp transport protocol '" + got + "' in its " + what + ", we speak '" +
                    kVersion + "' (mixed uccl versions?)",
                peer.peer_rank);
}

void close_fds(const std::vector<int>& fds) {
  for (int fd : fds) close(fd);
}

class TcpPendingConnect : public PendingConnect {
 public:
  explicit TcpPendingConnect(const PeerContext& peer) : peer_(peer) {}
  std::string offer() override { return std::string(kVersion) + (encrypt_level(peer_.level) ? kTlsSuffix : ""); }
  Result<Endpoint*> finish(const std::string& answer, const std::vector<int>& fds) override {
    bool tls = false;
    Status s = parse(peer_, "answer", answer, &tls);
    if (!s.ok()) {
      close_fds(fds);
      return s;
    }
    return tcp::TcpEndpoint::create(peer_, fds, tls, /*server=*/false);
  }

 private:
  PeerContext peer_;
};

class TcpTransport : public Transport {
 public:
  // More than 64 sockets per peer buys nothing and part_count is 16 bits on the wire.
  explicit TcpTransport(int nsocks) : nsocks_(nsocks < 1 ? 1 : nsocks > 64 ? 64 : nsocks) {}
  TransportKind kind() const override { return TransportKind::kTcp; }
  int sockets_per_connection() const override { return nsocks_; }
  bool stripes_over_networks() const override { return true; }
  Result<PendingConnect*> start_connect(const PeerContext& peer) override {
    return static_cast<PendingConnect*>(new TcpPendingConnect(peer));
  }
  Result<Endpoint*> accept(const PeerContext& peer, const std::string& offer, std::string* answer,
                           const std::vector<int>& fds) override {
    bool tls = false;
    Status s = parse(peer, "offer", offer, &tls);
    if (!s.ok()) return s;  // the core answers the refusal on fds and closes them
    tls = tls || encrypt_level(peer.level);
    *answer = std::string(kVersion) + (tls ? kTlsSuffix : "");
    return tcp::TcpEndpoint::create(peer, fds, tls, /*server=*/true);
  }

 private:
  int nsocks_;
};

}  // namespace

std::unique_ptr<Transport> make_tcp_transport(int nsocks_per_peer) {
  return std::unique_ptr<Transport>(new TcpTransport(nsocks_per_peer));
}

}  // namespace uccl
