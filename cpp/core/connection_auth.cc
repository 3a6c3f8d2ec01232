// The keyed mode of connection setup (core/handshake.h): the connecting side reads each
// socket's greeting, then sends its hello with the MAC; a hello with a wrong MAC is refused
// with an unauthenticated ack. The accepting side's half lives in connection_accept.cc.
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/log.h"
#include "base/net.h"
#include "core/connection_state.h"

namespace uccl {

Status ConnectionManager::greet_outgoing(Outgoing& o, bool* all_greeted, bool* moved) {
  *all_greeted = true;
  for (size_t ch = 0; ch < o.fds.size(); ++ch) {
    size_t& got = o.greeting_read[ch];
    if (got == sizeof(Greeting)) continue;
    while (got < sizeof(Greeting)) {
      ssize_t r = ::recv(o.fds[ch], reinterpret_cast<char*>(&o.greetings[ch]) + got, sizeof(Greeting) - got, MSG_DONTWAIT);
      if (r > 0) {
        got += static_cast<size_t>(r);
        *moved = true;
        continue;
      }
      if (r == 0 || errno == ECONNRESET)
        return peer_closed_error(peer_context(o.peer), "before greeting us (does it run without a job key?)");
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        return SystemError("handshake recv", errno).with_context("connecting to " + peer_context(o.peer).describe());
      break;
    }
    if (got < sizeof(Greeting)) {
      *all_greeted = false;
      continue;
    }
    const std::string bad = validate_greeting(o.greetings[ch]);
    if (!bad.empty())
      return Status(Code::kRemoteError, peer_context(o.peer).describe() + " sent a bad greeting: " + bad, o.peer);
    const HelloHeader h = connection_hello(o, ch);
    o.hellos[ch] = h;
    std::string msg(reinterpret_cast<const char*>(&h), sizeof h);
    msg += hello_mac(key_, o.greetings[ch].nonce, h);
    if (ch == 0) msg += o.offer;
    UCCL_RETURN_IF_ERROR(send_all(o.fds[ch], msg.data(), msg.size(), now_s() + 10));
    *moved = true;
  }
  return Status::Ok();
}

void ConnectionManager::refuse_unauthenticated(int fd) {
  static const std::string why = "wrong job key: this rank's UCCL_JOB_KEY differs from the connecting rank's";
  AckHeader h{kAckMagic, static_cast<uint32_t>(Code::kUnauthenticated), static_cast<uint32_t>(why.size())};
  std::string msg(reinterpret_cast<const char*>(&h), sizeof h);
  msg.append(kMacBytes, '\0');  // no valid MAC: the refusal is the only unauthenticated ack
  msg += why;
  (void)::send(fd, msg.data(), msg.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

}  // namespace uccl
