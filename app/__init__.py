"""workload-resizer mutating admission webhook (``python -m app``): stamps each eligible pod's
baseline ``original-*`` annotations at CREATE, so the reconciler resizes it in place from what
its author wrote, never compounding."""
