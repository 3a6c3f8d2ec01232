// _core.Communicator.blocking_call: a fast path for Python's blocking collectives (see
// blocking_call.cc).
#pragma once

#include <pybind11/pybind11.h>

namespace uccl {

class Communicator;

// Values are part of the Python binding (uccl/comm.py passes them).
enum class BlockingKind : int { kAllReduce = 0, kAllGather = 1, kReduceScatter = 2, kBroadcast = 3 };

// Runs the collective on `in` / `out` (buffer-protocol objects; for broadcast both are the
// buffer) and waits for it. Returns false, having done nothing, when the buffers do not fit
// the fast path; raises the typed uccl error when the operation fails.
bool blocking_call(Communicator& c, BlockingKind kind, pybind11::handle in, pybind11::handle out, int op, int root);

}  // namespace uccl
