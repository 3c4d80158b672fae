"""workload-resizer reconciler: watches bound pods and resizes them in place.

Layers, lowest first (import-linter keeps a layer from importing one above it):
``kube`` (the Kubernetes client: requests, informers, work queue, leader election,
events) -> the controller (``controller`` decides and writes through ``ports``, ``manager`` owns
the caches and workers, ``config_source`` the ConfigMap) -> ``commands`` (plan, restore) and
``run`` (process wiring, from the ``settings`` built once from the flags).
"""
