"""The cost model and algorithm choice of uccl, for planning without running anything.

Everything here is the C++ code a communicator runs (through ``uccl._core``): the topology file
is parsed by the same reader as ``UCCL_TOPO_FILE``, predictions come from
``cpp/topology/cost_model``, and ``choose`` / ``algorithm="auto"`` is the selection table of
``cpp/algorithms/select`` with this process's ``UCCL_SMALL_MSG_BYTES``. A planner that ranks
layouts with it sees what uccl itself would do.

    from uccl import cost
    topo = cost.Topology.from_file("topo.yaml", ["a-node1"] * 4 + ["b-node1"] * 4)
    cost.choose(topo, "all_reduce", 64 << 20)          # ('hier', 0.0213, 'all_reduce of 64 MiB ...')
    cost.predict(topo, "all_gather", 1 << 20, ranks=[0, 4], algorithm="ring")

Sizes: ``nbytes`` is the full vector (the gathered output of all_gather, the reduced vector of
all_reduce / reduce_scatter, the broadcast buffer; all_to_all: one rank's send buffer). Times
are seconds. Bad input raises ``uccl.InvalidArgument`` naming what was wrong.
"""
import json

from . import _core

__all__ = ["Topology", "predict", "predict_p2p", "choose"]


class Topology:
    """Where each rank runs and what the links are: a topology file plus a placement.

    placement: one host name (as the file names it) per rank; rank i runs on placement[i].
    """

    __slots__ = ("_t",)

    def __init__(self, impl):
        self._t = impl

    @classmethod
    def from_file(cls, path, placement):
        """The UCCL_TOPO_FILE format (JSON or YAML), parsed by uccl's C++ reader."""
        return cls(_core.CostTopology.from_file(str(path), list(placement)))

    @classmethod
    def from_dict(cls, d, placement):
        """The same structure as the file, already parsed (handed to the C++ reader as JSON)."""
        return cls(_core.CostTopology.from_text(json.dumps(d), "topology.json", list(placement)))

    @property
    def world_size(self):
        return self._t.world_size

    def host_of(self, rank):
        """Index of rank's host (hosts numbered in order of their lowest rank)."""
        return self._t.host_of(rank)

    def cluster_of(self, rank):
        """Index of rank's cluster (clusters numbered in order of their lowest rank)."""
        return self._t.cluster_of(rank)

    def host_name(self, rank):
        return self._t.host_name(rank)

    def cluster_name(self, rank):
        return self._t.cluster_name(rank)

    @property
    def num_hosts(self):
        return self._t.num_hosts()

    @property
    def num_clusters(self):
        return self._t.num_clusters()

    def describe(self):
        """Clusters, hosts, link rates and the hierarchy, as communicator.describe() shows them."""
        return self._t.describe()

    def __repr__(self):
        return f"<uccl.cost.Topology {self.world_size} ranks, {self.num_hosts} hosts, {self.num_clusters} clusters>"


def _ranks(ranks):
    return None if ranks is None else [int(r) for r in ranks]


def predict(topo, collective, nbytes, ranks=None, algorithm="auto"):
    """Predicted seconds of `collective` over the group `ranks` (global ranks in group order;
    None = all). algorithm: "auto" (what uccl would pick) or a forced name ("ring", "direct",
    "rhd", "hier", "twoshot"); a forced one that cannot run on this group raises InvalidArgument saying why."""
    return _core.cost_predict(topo._t, collective, float(nbytes), _ranks(ranks), algorithm)


def predict_p2p(topo, src, dst, nbytes):
    """Predicted seconds of one message of nbytes from rank src to rank dst."""
    return _core.cost_predict_p2p(topo._t, int(src), int(dst), float(nbytes))


def choose(topo, collective, nbytes, ranks=None):
    """(algorithm name, predicted seconds, reason): the choice a communicator of this group
    makes under UCCL_ALGO=auto, with the candidates' predicted costs in the reason."""
    name, seconds, reason = _core.cost_choose(topo._t, collective, float(nbytes), _ranks(ranks))
    return name, seconds, reason
