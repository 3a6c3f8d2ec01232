// Membership check: before uccl's rendezvous, the processes meeting on a group's store agree that
// every rank is claimed by exactly one process, that they all configured one world size and that
// they run one uccl version.
//
// Why here: torchft-style jobs reconfigure their process group every time a replica dies or joins
// (a new store prefix, a new rank, a new world size, in the same process). A slip in that
// bookkeeping (a replacement started with a survivor's rank, one process told a different world
// size) would otherwise leave uccl's rendezvous waiting for a peer that never comes until the
// timeout, or wire the group to the wrong process. With this check every process of the group
// fails at once with kInvalidArgument naming the rank at fault.
//
// Keys (under the group's own, already prefixed store): "uccl/torch/size" (the first process's
// "size:rank:version", compare-and-set), "uccl/torch/claim/<rank>" (a counter), "uccl/torch/who/<rank>"
// (pid@host of the claimer) and "uccl/torch/bad" (the first failure, for everyone waiting). A
// prefix is meant for one group: reusing it for a second group is refused as a duplicate claim,
// the same as uccl's own rendezvous keys would be stale.
//
// A process that comes after the group is complete (a late duplicate) fails alone; the group it
// collided with has already gone on and is unharmed.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "uccl/status.h"

namespace uccl_torch {

// Ok once all `size` ranks claimed their rank with the same size; kInvalidArgument (peer: the
// rank at fault) on a mismatch seen by this or any other process; kTimeout (peer: the first rank
// missing) when not everyone came within timeout_s (< 0: the store's timeout).
uccl::Status check_membership(c10d::Store& store, int rank, int size, double timeout_s);

}  // namespace uccl_torch
