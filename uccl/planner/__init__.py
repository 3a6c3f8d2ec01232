"""uccl.planner: iteration-time model and strategy search for uccl.parallel (see __main__).

Pure Python; communication priced by uccl.cost (the C++ cost model), injectable for tests, or
by a calibration measured on the ranks (calibration.py: CPU-bound communication under quotas).
"""
from .estimate import Comm, Estimate, Strategy, estimate  # noqa: F401
from .search import search  # noqa: F401
from .spec import Cluster, DeviceKind, ModelSpec, PlanInputError  # noqa: F401
