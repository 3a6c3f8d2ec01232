// Status codes and Result<T>: how errors travel inside uccl.
//
// Why not exceptions: errors are produced on the progress path (possibly a background thread)
// and must be carried to whichever thread waits on the Work. A Status is a plain value that can
// be stored in a request and copied across threads. Exceptions appear only at the API boundary
// (the Python bindings and the torch backend turn a Status into a typed exception there).
#pragma once

#include <memory>
#include <string>
#include <utility>

namespace uccl {

// Keep in sync with uccl/errors.py (the Python exception hierarchy mirrors these codes).
enum class Code : int {
  kOk = 0,
  kInvalidArgument = 1,  // the caller passed something wrong (size, dtype, rank, ...)
  kNotSupported = 2,     // a normal answer: the caller may fall back (UCC's habit)
  kTimeout = 3,          // a wait passed its deadline
  kRemoteError = 4,      // a peer died, closed its connection, or sent garbage
  kMismatch = 5,         // ranks called different collectives / counts / dtypes in one slot
  kAborted = 6,          // abort() was called on the communicator
  kSystemError = 7,      // a local syscall failed (errno text in the message)
  kInternal = 8,         // a bug in uccl
  kUnauthenticated = 9,  // a peer or store refused our job key, or we refused theirs (bootstrap/auth.h)
};

const char* code_name(Code c);

class Status {
 public:
  Status() = default;
  Status(Code code, std::string msg, int peer = -1)
      : rep_(code == Code::kOk && msg.empty() && peer < 0 ? nullptr
                                                          : std::make_shared<const Rep>(Rep{code, peer, std::move(msg), {}})) {}
  static Status Ok() { return Status(); }

  bool ok() const { return !rep_ || rep_->code == Code::kOk; }
  Code code() const { return rep_ ? rep_->code : Code::kOk; }
  const std::string& message() const { return rep_ ? rep_->msg : empty(); }
  int peer() const { return rep_ ? rep_->peer : -1; }  // rank of the peer involved, or -1
  // What failed first, when this failure descends from another rank's ("" if it does not or
  // is not known). Code branches on this field; the message repeats it for people.
  const std::string& root_cause() const { return rep_ ? rep_->root_cause : empty(); }

  // Returns a copy whose message gains "context: " in front (e.g. "all_reduce #12: ").
  Status with_context(const std::string& context) const {
    if (ok()) return *this;
    return Status(code(), context + ": " + message(), peer(), root_cause());
  }
  // Returns a copy that descends from `cause`: the field is set and the message gains
  // "; root cause: <cause>" (kRootCauseMarker), so the chain stays one level deep.
  Status with_root_cause(const std::string& cause) const {
    return Status(code(), message() + kRootCauseMarker + cause, peer(), cause);
  }
  std::string to_string() const { return std::string(code_name(code())) + ": " + message(); }

 private:
  // How a failure message names the failure it descends from: "<what happened here>; root
  // cause: <what failed first>". Transports carry a failing peer's root cause in front of its
  // close, the engine adds a store record's; either way the chain stays one level deep.
  static constexpr char kRootCauseMarker[] = "; root cause: ";
  // Why a pointer: a Status travels on every call of the progress path (each step, endpoint
  // lookup and request returns or holds one) and is almost always Ok. Ok is a null pointer:
  // constructing, moving and destroying it is a word, where two inline strings cost a visible
  // share of an 8-byte all_reduce. A failure's text lives in one immutable Rep, shared by copies
  // (requests failed together, the Work and the communicator's record) across threads.
  struct Rep {
    Code code;
    int peer;
    std::string msg;
    std::string root_cause;
  };
  Status(Code code, std::string msg, int peer, std::string root_cause)
      : rep_(std::make_shared<const Rep>(Rep{code, peer, std::move(msg), std::move(root_cause)})) {}
  static const std::string& empty() {
    static const std::string e;
    return e;
  }
  std::shared_ptr<const Rep> rep_;  // null: Ok
};

inline Status InvalidArgument(std::string m) { return Status(Code::kInvalidArgument, std::move(m)); }
inline Status NotSupported(std::string m) { return Status(Code::kNotSupported, std::move(m)); }
inline Status Internal(std::string m) { return Status(Code::kInternal, std::move(m)); }
// errno-based failure: "what: strerror(errno)".
Status SystemError(const std::string& what, int err);

template <class T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit on purpose
  Result(Status s) : status_(std::move(s)) {}    // NOLINT
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() { return value_; }
  T&& take() { return std::move(value_); }

 private:
  Status status_;
  T value_{};
};

#define UCCL_RETURN_IF_ERROR(expr)      \
  do {                                  \
    ::uccl::Status _s = (expr);         \
    if (!_s.ok()) return _s;            \
  } while (0)

}  // namespace uccl
