"""The workload-aware router of the performance-aware load-balancer paper (issue 16): request classes
from profiled prefill and decode times (section 3), the workload impact estimator (eq. 1-2), and the
heuristic-guided reward (eq. 3-4)."""
