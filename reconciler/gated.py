"""Pods held by scheduling gates: their originals bound to them while they are at generation 1.

Removing a pod's last scheduling gate changes its spec (the apiserver bumps
``metadata.generation``) before the pod can be bound to a node, and on a changed pod only a
pod MAC vouches for originals (:mod:`resizer.integrity`: anyone mints an admission MAC for
any values through a made-up review). So for an eligible pod still held by its gates at
generation 1 the reconciler writes the binding the baseline authority gives
(:func:`resizer.early_binding`): one merge patch, conditional on the pod as read; no Event,
a log line and ``workload_resizer_originals_bound_total{when="gated"}``. Nothing else happens
to an unbound pod. A gate removed before that (the reconciler down, a gate remover faster)
leaves admission-signed originals on a changed spec: the pod is held (``OriginalsUnverified``),
never resized (docs/how-it-works.md).
"""

from __future__ import annotations

import logging

from kube import ApiError
from kube.informer import object_key
from reconciler import metrics
from reconciler.memory import DONE, Context, Result
from reconciler.ports import Obj
from resizer import KeyRing, ResizerError, early_binding, eligibility
from resizer.podstate import read_mac

log = logging.getLogger("reconciler.gated")


def wants_binding(pod: Obj, keyring: KeyRing) -> bool:
    """Whether the pod is worth a binding pass (cheap: no MAC computed): eligible, live, unbound, held
    by scheduling gates at generation 1, with a key to sign with, its originals bound by no pod MAC."""
    meta, spec = pod["metadata"], pod["spec"]
    if not keyring or not spec.get("schedulingGates") or spec.get("nodeName") or "deletionTimestamp" in meta:
        return False
    mac = read_mac(pod)
    return meta.get("generation") == 1 and eligibility(pod).eligible and not (mac is not None and mac.scope == "pod")


async def bind(context: Context, pod: Obj) -> Result:
    """Write the authority's early binding of `pod` (nothing when it gives none)."""
    try:
        patch = early_binding(pod, context.keyring())
    except ResizerError as err:  # reported once the pod is bound (ResizeFailed)
        log.debug("gated pod's originals not bound", extra={"pod": object_key(pod), "error": str(err)})
        return DONE
    if not patch:
        return DONE
    try:
        await context.writer.record(pod, patch, resource_version=pod["metadata"]["resourceVersion"])
    except ApiError as err:
        if err.retryable:  # a 409 included: the pod changed, decided again from the cache
            raise
        if err.status != 404:
            log.warning("cannot bind a gated pod's originals", extra={"pod": object_key(pod), "error": err.message})
        return DONE
    metrics.ORIGINALS_BOUND.labels("gated").inc()
    log.info(
        "originals bound before the pod's scheduling gates are removed",
        extra={"pod": object_key(pod), "recordedFromSpec": len(patch) - 1},
    )
    return DONE
