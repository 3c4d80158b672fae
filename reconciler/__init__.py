"""workload-resizer reconciler: watches bound pods and resizes them in place.

Layers, lowest first (a module only imports the ones above it):
kube (API access) -> informer, workqueue, events, leader -> config_source ->
controller (decisions from the pure `resizer` core, the three-step writes) -> run.
"""
