// TLS for tcp links (see tcp_tls.h): settings, the kernel probe, PSK callbacks, TlsLink.
#include "transports/tcp/tcp_tls.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "base/log.h"
#include "base/net.h"

#ifndef TCP_ULP
#define TCP_ULP 31
#endif

namespace uccl {

const TextSetting kEncrypt("tcp", "UCCL_ENCRYPT", "none",
                           "TLS on tcp connections: none, inter_cluster (pairs whose cluster labels differ) or all",
                           one_of({"none", "inter_cluster", "all"}));
const BoolSetting kTlsKernel("tcp", "UCCL_TLS_KERNEL", "1",
                             "hand TLS to the kernel (kTLS) where it offers it; 0 = always in user space", boolean());

bool encrypt_level(int level) {
  const std::string& mode = kEncrypt.get();
  if (mode == "all") return true;
  if (mode == "inter_cluster") return level < 0 || level >= 2;
  return false;
}

bool kernel_tls_available(std::string* why) {
  static std::once_flag once;
  static bool ok = false;
  static std::string reason;
  std::call_once(once, [] {
    // Attaching the ULP needs an established TCP socket: a loopback connection to ourselves.
    SockAddr a;
    auto pa = parse_address("127.0.0.1", 0);
    if (!pa.ok()) {
      reason = "no loopback address";
      return;
    }
    a = pa.value();
    auto l = listen_on(&a);
    if (!l.ok()) {
      reason = "probe failed: " + l.status().message();
      return;
    }
    auto c = connect_to(a, now_s() + 2);
    if (!c.ok()) {
      reason = "probe failed: " + c.status().message();
      close(l.value());
      return;
    }
    if (setsockopt(c.value(), IPPROTO_TCP, TCP_ULP, "tls", sizeof("tls")) == 0) ok = true;
    else reason = errno == ENOENT ? "the kernel has no tls module loaded (modprobe tls)" : std::strerror(errno);
    close(c.value());
    close(l.value());
  });
  if (why) *why = reason;
  return ok;
}

std::string tls_mode() {
  std::string why;
  const bool k = kernel_tls_available(&why);
  std::string s = "UCCL_ENCRYPT=" + kEncrypt.get() + "; TLS 1.3 PSK (AES-128-GCM, ECDHE); ";
  if (!kTlsKernel.get()) return s + "user-space TLS (UCCL_TLS_KERNEL=0)";
  return s + (k ? "kernel TLS available" : "user-space TLS (no kernel TLS: " + why + ")");
}

namespace tcp {
namespace {

const unsigned char kAes128GcmSha256[] = {0x13, 0x01};
const unsigned char kIdentity[] = "uccl-link-psk";
constexpr size_t kIdentityLen = sizeof(kIdentity) - 1;

std::string ssl_errors() {
  std::string s;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    s += (s.empty() ? "" : "; ") + std::string(buf);
  }
  return s.empty() ? "no detail" : s;
}

SSL_SESSION* psk_session(SSL* ssl, const std::string& psk) {
  const SSL_CIPHER* cipher = SSL_CIPHER_find(ssl, kAes128GcmSha256);
  if (!cipher) return nullptr;
  SSL_SESSION* s = SSL_SESSION_new();
  if (!s) return nullptr;
  if (!SSL_SESSION_set1_master_key(s, reinterpret_cast<const unsigned char*>(psk.data()), psk.size()) ||
      !SSL_SESSION_set_cipher(s, cipher) || !SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION)) {
    SSL_SESSION_free(s);
    return nullptr;
  }
  return s;
}

int use_session(SSL* ssl, const EVP_MD* md, const unsigned char** id, size_t* idlen, SSL_SESSION** sess) {
  auto* link = static_cast<TlsLink*>(SSL_get_app_data(ssl));
  SSL_SESSION* s = link ? psk_session(ssl, link->psk()) : nullptr;
  if (!s) return 0;
  if (md && md != SSL_CIPHER_get_handshake_digest(SSL_SESSION_get0_cipher(s))) {
    SSL_SESSION_free(s);
    *sess = nullptr;
    *id = nullptr;
    *idlen = 0;
    return 1;
  }
  *sess = s;
  *id = kIdentity;
  *idlen = kIdentityLen;
  return 1;
}

int find_session(SSL* ssl, const unsigned char* id, size_t idlen, SSL_SESSION** sess) {
  auto* link = static_cast<TlsLink*>(SSL_get_app_data(ssl));
  *sess = nullptr;
  if (!link || idlen != kIdentityLen || std::memcmp(id, kIdentity, idlen) != 0) return 1;  // unknown: fail
  *sess = psk_session(ssl, link->psk());
  return *sess ? 1 : 0;
}

SSL_CTX* context(bool server) {
  static std::once_flag once;
  static SSL_CTX* ctx[2] = {nullptr, nullptr};
  std::call_once(once, [] {
    for (int srv = 0; srv < 2; ++srv) {
      SSL_CTX* c = SSL_CTX_new(srv ? TLS_server_method() : TLS_client_method());
      if (!c) continue;
      SSL_CTX_set_min_proto_version(c, TLS1_3_VERSION);
      SSL_CTX_set_max_proto_version(c, TLS1_3_VERSION);
      SSL_CTX_set_ciphersuites(c, "TLS_AES_128_GCM_SHA256");
      SSL_CTX_set_num_tickets(c, 0);  // no post-handshake messages: kTLS receive sees data only
      uint64_t opts = SSL_OP_IGNORE_UNEXPECTED_EOF | SSL_OP_NO_TICKET;
#ifdef SSL_OP_ENABLE_KTLS
      if (kTlsKernel.get() && kernel_tls_available(nullptr)) opts |= SSL_OP_ENABLE_KTLS;
#endif
      SSL_CTX_set_options(c, opts);
      SSL_CTX_set_mode(c, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
      if (srv) SSL_CTX_set_psk_find_session_callback(c, find_session);
      else SSL_CTX_set_psk_use_session_callback(c, use_session);
      ctx[srv] = c;
    }
  });
  return ctx[server ? 1 : 0];
}

}  // namespace

Result<std::unique_ptr<TlsLink>> TlsLink::create(int fd, bool server, const std::string& link_key) {
  if (link_key.size() < 32) return Internal("TLS: no key material for this link");
  SSL_CTX* ctx = context(server);
  if (!ctx) return Status(Code::kSystemError, "TLS: cannot create an OpenSSL context: " + ssl_errors());
  SSL* ssl = SSL_new(ctx);
  if (!ssl) return Status(Code::kSystemError, "TLS: SSL_new failed: " + ssl_errors());
  std::unique_ptr<TlsLink> link(new TlsLink(ssl, link_key.substr(0, 32)));
  SSL_set_app_data(ssl, link.get());
  if (SSL_set_fd(ssl, fd) != 1) return Status(Code::kSystemError, "TLS: SSL_set_fd failed: " + ssl_errors());
  if (server) SSL_set_accept_state(ssl);
  else SSL_set_connect_state(ssl);
  return link;
}

TlsLink::~TlsLink() { SSL_free(ssl_); }

Status TlsLink::handshake(bool* done, bool* want_write) {
  *done = *want_write = false;
  ERR_clear_error();
  const int r = SSL_do_handshake(ssl_);
  if (r == 1) {
    *done = true;
    ktls_send_ = BIO_get_ktls_send(SSL_get_wbio(ssl_));
    ktls_recv_ = BIO_get_ktls_recv(SSL_get_rbio(ssl_));
    return Status::Ok();
  }
  const int e = SSL_get_error(ssl_, r);
  if (e == SSL_ERROR_WANT_READ) return Status::Ok();
  if (e == SSL_ERROR_WANT_WRITE) {
    *want_write = true;
    return Status::Ok();
  }
  last_error_ = e == SSL_ERROR_SYSCALL && errno ? std::strerror(errno)
                : e == SSL_ERROR_SYSCALL || e == SSL_ERROR_ZERO_RETURN ? "the peer closed the connection"
                                                                        : ssl_errors();
  return Status(Code::kRemoteError, "TLS handshake failed: " + last_error_);
}

ssize_t TlsLink::write(const void* buf, size_t n) {
  if (n == 0) return 0;
  ERR_clear_error();
  size_t written = 0;
  if (SSL_write_ex(ssl_, buf, n, &written) == 1) return static_cast<ssize_t>(written);
  const int e = SSL_get_error(ssl_, 0);
  if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
    errno = EAGAIN;
    return -1;
  }
  last_error_ = e == SSL_ERROR_SYSCALL ? std::string(std::strerror(errno ? errno : EPIPE)) : ssl_errors();
  if (e != SSL_ERROR_SYSCALL || !errno) errno = e == SSL_ERROR_SYSCALL ? EPIPE : EBADMSG;
  return -1;
}

ssize_t TlsLink::read(void* buf, size_t n) {
  ERR_clear_error();
  size_t got = 0;
  if (SSL_read_ex(ssl_, buf, n, &got) == 1) return static_cast<ssize_t>(got);
  const int e = SSL_get_error(ssl_, 0);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
    errno = EAGAIN;
    return -1;
  }
  if (e == SSL_ERROR_ZERO_RETURN) return 0;  // close_notify, or a plain close (IGNORE_UNEXPECTED_EOF)
  if (e == SSL_ERROR_SYSCALL && errno == 0) return 0;
  last_error_ = e == SSL_ERROR_SYSCALL ? std::string(std::strerror(errno)) : ssl_errors();
  if (e != SSL_ERROR_SYSCALL) errno = EBADMSG;
  return -1;
}

bool TlsLink::pending() const { return SSL_pending(ssl_) > 0; }

std::string TlsLink::describe() const {
  const SSL_CIPHER* c = SSL_get_current_cipher(ssl_);
  std::string s = std::string(SSL_get_version(ssl_)) + " " + (c ? SSL_CIPHER_get_name(c) : "?") + ", ";
  if (ktls_send_ && ktls_recv_) return s + "kernel TLS";
  if (!ktls_send_ && !ktls_recv_) return s + "user-space TLS";
  return s + (ktls_send_ ? "kernel send, user-space receive" : "user-space send, kernel receive");
}

}  // namespace tcp
}  // namespace uccl
