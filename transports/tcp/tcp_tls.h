// TLS for tcp links: which pairs are encrypted (UCCL_ENCRYPT) and one TLS session per socket.
//
// Why: traffic between clusters may cross a public network, while the fabric inside a
// cluster is trusted and must not be slowed. UCCL_ENCRYPT=inter_cluster encrypts the tcp
// connections of pairs whose cluster labels differ (topology level 2), `all` every tcp
// connection, `none` (the default) nothing. shm never leaves the host; verbs is not encrypted.
//
// How: TLS 1.3 (OpenSSL), AES-128-GCM, authenticated by a pre-shared key with an ephemeral
// ECDHE exchange (psk_dhe_ke): no certificates. The PSK is PeerContext::link_key, which the
// core derives from the job key (bootstrap/auth.h) and the pair's ranks; without a job key,
// from the per-job secret in the store. With a job key, only the two ranks can complete the
// handshake. Without one, the ECDHE exchange still protects the traffic against passive
// eavesdroppers (even ones who read the store later: the keys are ephemeral), but not against
// an active man in the middle who can read the store (the secret there authenticates the PSK).
//
// Kernel TLS: with SSL_OP_ENABLE_KTLS, OpenSSL hands the session keys to the kernel's `tls`
// module after the handshake where the kernel offers it; the endpoint then uses plain
// send/recv on the socket (large messages keep zero-copy-ish speed: encryption happens in
// the kernel, in place). Where it does not (no `tls` module), the endpoint reads and writes
// through SSL_read/SSL_write in user space. describe() says which, per direction.
//
// Everything here is non-blocking: handshake() is driven by the endpoint's progress().
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "base/config.h"
#include "uccl/status.h"

typedef struct ssl_st SSL;

namespace uccl {

extern const TextSetting kEncrypt;    // UCCL_ENCRYPT
extern const BoolSetting kTlsKernel;  // UCCL_TLS_KERNEL

// Whether this process encrypts a tcp pair at topology `level` (-1 = unknown: encrypted
// unless UCCL_ENCRYPT=none, the safe side).
bool encrypt_level(int level);
// Whether the kernel offers TLS (probed once on a loopback connection); why not otherwise.
bool kernel_tls_available(std::string* why);
// One line for python -m uccl.info.
std::string tls_mode();

namespace tcp {

class TlsLink {
 public:
  // A TLS 1.3 session over the (non-blocking) socket fd; server = the accepting side.
  // link_key: 32 bytes, the same on both sides (PeerContext::link_key).
  static Result<std::unique_ptr<TlsLink>> create(int fd, bool server, const std::string& link_key);
  ~TlsLink();
  TlsLink(const TlsLink&) = delete;
  TlsLink& operator=(const TlsLink&) = delete;

  // Advances the handshake. Ok with *done once finished; Ok and !*done while it waits for the
  // socket (*want_write: for room to write, else for bytes to read); an error if it failed.
  Status handshake(bool* done, bool* want_write);
  // Per direction: true when the kernel encrypts (plain send/recv on the socket from now on).
  bool kernel_send() const { return ktls_send_; }
  bool kernel_recv() const { return ktls_recv_; }
  // User-space I/O with the semantics of send/recv on a non-blocking socket: > 0 bytes, 0 at
  // the end of the stream, -1 with errno (EAGAIN when it would block, EBADMSG for a bad record).
  ssize_t write(const void* buf, size_t n);
  ssize_t read(void* buf, size_t n);
  // Decrypted bytes waiting in OpenSSL's buffer (epoll does not see them).
  bool pending() const;
  // "TLS1.3 TLS_AES_128_GCM_SHA256, kernel" / "..., user space" / "kernel send, user-space recv".
  std::string describe() const;
  const std::string& psk() const { return psk_; }
  // Why the last read/write/handshake failed (OpenSSL's error queue).
  const std::string& last_error() const { return last_error_; }

 private:
  TlsLink(SSL* ssl, std::string psk) : ssl_(ssl), psk_(std::move(psk)) {}
  SSL* ssl_;
  std::string psk_;
  bool ktls_send_ = false, ktls_recv_ = false;
  std::string last_error_;
};

}  // namespace tcp
}  // namespace uccl
