// The agreement's messages (core/agreement.h): text bodies in an authenticated binary frame.
// Everything here is pure (no sockets), so tests/fuzz/fuzz_agreement.cc drives it directly.
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "bootstrap/auth.h"
#include "core/agreement.h"

namespace uccl {
namespace {

constexpr size_t kMaxText = 256;  // store address, prefix

bool parse_u64(const std::string& s, uint64_t* v) {
  if (s.empty() || s.size() > 20) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long x = std::strtoull(s.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *v = x;
  return true;
}

bool parse_int(const std::string& s, int lo, int hi, int* v) {
  if (s.empty() || s.size() > 11) return false;
  size_t i = s[0] == '-' ? 1 : 0;
  if (i == s.size()) return false;
  for (; i < s.size(); ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  long x = std::strtol(s.c_str(), nullptr, 10);
  if (x < lo || x > hi) return false;
  *v = static_cast<int>(x);
  return true;
}

bool plain_text(const std::string& s) {
  if (s.empty() || s.size() > kMaxText) return false;
  for (char c : s)
    if (c <= ' ' || c > '~') return false;
  return true;
}

std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  std::string w;
  while (in >> w) out.push_back(w);
  return out;
}

std::string mac_of(const std::string& key, const std::string& signed_part) {
  return hmac_sha256(key, "uccl agreement", signed_part);
}

}  // namespace

bool Decision::excludes(int rank) const {
  for (int f : failed)
    if (f == rank) return true;
  return false;
}

std::string Decision::describe() const {
  std::string s;
  if (failed.empty()) s = "no rank failed";
  for (size_t i = 0; i < failed.size(); ++i) s += (i ? ", " : (failed.size() > 1 ? "ranks " : "rank ")) + std::to_string(failed[i]);
  if (!failed.empty()) s += " failed";
  return s + " (decided by rank " + std::to_string(ballot.rank) + ", round " + std::to_string(ballot.round) + ")";
}

std::string encode_agree_body(const AgreeMsg& m) {
  std::ostringstream o;
  o << "ballot " << m.ballot.round << ' ' << m.ballot.rank << '\n';
  if (m.instance) o << "instance " << m.instance << '\n';
  if (m.type == AgreeType::kReply)
    o << "ok " << (m.ok ? 1 : 0) << "\npromised " << m.promised.round << ' ' << m.promised.rank << '\n';
  if (m.has_decision) {
    const Decision& d = m.decision;
    o << "decision " << d.ballot.round << ' ' << d.ballot.rank << '\n' << "failed";
    for (int f : d.failed) o << ' ' << f;
    o << "\nstore " << d.store << "\nprefix " << d.prefix << '\n';
  }
  return o.str();
}

Result<AgreeMsg> parse_agree_body(const std::string& body, int size) {
  AgreeMsg m;
  std::istringstream in(body);
  std::string line;
  bool have_ballot = false, have_failed = false, have_store = false, have_prefix = false;
  auto bad = [](const std::string& why) { return Status(Code::kRemoteError, "malformed agreement message: " + why); };
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto w = words(line);
    if (w.empty()) return bad("blank line with spaces");
    const std::string& k = w[0];
    if ((k == "ballot" || k == "promised" || k == "decision") && w.size() == 3) {
      Ballot b;
      if (!parse_u64(w[1], &b.round) || !parse_int(w[2], -1, size - 1, &b.rank)) return bad("ballot '" + line + "'");
      if (k == "ballot") {
        m.ballot = b;
        have_ballot = true;
      } else if (k == "promised") {
        m.promised = b;
      } else {
        if (b.rank < 0) return bad("decision without a coordinator");
        m.decision.ballot = b;
        m.has_decision = true;
      }
    } else if (k == "instance" && w.size() == 2) {
      uint64_t v;
      if (!parse_u64(w[1], &v) || v > 1000000) return bad("instance '" + line + "'");
      m.instance = static_cast<uint32_t>(v);
    } else if (k == "ok" && w.size() == 2 && (w[1] == "0" || w[1] == "1")) {
      m.ok = w[1] == "1";
    } else if (k == "failed" && !have_failed) {
      have_failed = true;
      int prev = -1;
      for (size_t i = 1; i < w.size(); ++i) {
        int r;
        if (!parse_int(w[i], 0, size - 1, &r) || r <= prev) return bad("failed ranks '" + line + "'");
        m.decision.failed.push_back(r);
        prev = r;
      }
    } else if (k == "store" && w.size() == 2 && plain_text(w[1])) {
      m.decision.store = w[1];
      have_store = true;
    } else if (k == "prefix" && w.size() == 2 && plain_text(w[1])) {
      m.decision.prefix = w[1];
      have_prefix = true;
    } else {
      return bad("line '" + line.substr(0, 80) + "'");
    }
  }
  if (!have_ballot) return bad("no ballot");
  if (m.has_decision != (have_failed && have_store && have_prefix) || (!m.has_decision && (have_failed || have_store || have_prefix)))
    return bad("incomplete decision");
  if (m.has_decision && m.decision.excludes(m.decision.ballot.rank)) return bad("the coordinator excludes itself");
  return m;
}

std::string encode_agree_frame(const std::string& key, uint64_t comm_id, int from, int to, const AgreeMsg& m) {
  const std::string body = encode_agree_body(m);
  AgreeHeader h{};
  h.magic = kAgreeMagic;
  h.version = kAgreeVersion;
  h.type = static_cast<uint8_t>(m.type);
  h.comm_id = comm_id;
  h.from_rank = from;
  h.to_rank = to;
  h.body_bytes = static_cast<uint32_t>(body.size());
  std::string f(reinterpret_cast<const char*>(&h), sizeof h);
  f += body;
  f += mac_of(key, f);
  return f;
}

Result<AgreeMsg> parse_agree_frame(const std::string& key, uint64_t comm_id, int me, int size,
                                   const std::string& frame, int* from) {
  auto bad = [](const std::string& why) { return Status(Code::kRemoteError, "agreement message refused: " + why); };
  if (frame.size() < sizeof(AgreeHeader) + kMacBytes) return bad("too short");
  AgreeHeader h;
  std::memcpy(&h, frame.data(), sizeof h);
  if (h.magic != kAgreeMagic) return bad("bad magic");
  if (h.version != kAgreeVersion)
    return bad("protocol version " + std::to_string(h.version) + ", this library speaks " + std::to_string(kAgreeVersion));
  if (h.body_bytes > kMaxAgreeBody || frame.size() != sizeof h + h.body_bytes + kMacBytes) return bad("bad length");
  if (h.comm_id != comm_id) return bad("another communicator");
  if (h.to_rank != me || h.from_rank < 0 || h.from_rank >= size || h.from_rank == me) return bad("bad ranks");
  const AgreeType t = static_cast<AgreeType>(h.type);
  if (t != AgreeType::kPrepare && t != AgreeType::kAccept && t != AgreeType::kCommit && t != AgreeType::kState &&
      t != AgreeType::kReply)
    return bad("unknown type " + std::to_string(h.type));
  const std::string signed_part = frame.substr(0, sizeof h + h.body_bytes);
  const std::string mac = mac_of(key, signed_part);
  if (!equal_ct(mac.data(), frame.data() + signed_part.size(), kMacBytes))
    return Status(Code::kUnauthenticated, "agreement message from rank " + std::to_string(h.from_rank) +
                                              " does not carry this communicator's MAC");
  auto m = parse_agree_body(frame.substr(sizeof h, h.body_bytes), size);
  if (!m.ok()) return m.status();
  AgreeMsg msg = m.take();
  msg.type = t;
  if ((t == AgreeType::kAccept || t == AgreeType::kCommit) && !msg.has_decision) return bad("proposal without a decision");
  if (from) *from = h.from_rank;
  return msg;
}

}  // namespace uccl
