"""resizer.vpa: which VerticalPodAutoscaler updates a pod's requests, through its owner chain."""

from __future__ import annotations

from typing import Any

import pytest

from resizer.eligibility import controller_reference
from resizer.vpa import (
    NO_OWNER,
    Owner,
    Unresolved,
    VpaVerdict,
    admission_vpa_hold,
    controller_owner,
    deployment_of,
    managing_vpa,
    owner_chain,
    update_mode,
    vpa_index,
)


def vpa(
    name: str, kind: str, target: str, mode: str | None = "InPlaceOrRecreate", namespace: str = "ns"
) -> dict[str, Any]:
    spec: dict[str, Any] = {"targetRef": {"apiVersion": "apps/v1", "kind": kind, "name": target}}
    if mode is not None:
        spec["updatePolicy"] = {"updateMode": mode}
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


def pod(kind: str | None, name: str = "", namespace: str = "ns", controller: bool = True) -> dict[str, Any]:
    refs = [{"kind": kind, "name": name, "controller": controller}] if kind else []
    return {"metadata": {"name": "p", "namespace": namespace, "ownerReferences": refs}}


OWNERS = {
    ("ns", Owner("ReplicaSet", "web-6d4f")): Owner("Deployment", "web"),
    ("ns", Owner("ReplicaSet", "bare")): NO_OWNER,
    ("ns", Owner("Job", "nightly-1")): Owner("CronJob", "nightly"),
}


def lookup(namespace: str, owner: Owner) -> Owner | None:
    return OWNERS.get((namespace, owner))


@pytest.mark.parametrize("mode, expected", [(None, "Auto"), ("", "Auto"), ("Off", "Off"), ("InPlace", "InPlace")])
def test_update_mode_defaults_to_auto(mode: str | None, expected: str) -> None:
    assert update_mode(vpa("v", "Deployment", "web", mode)) == expected


@pytest.mark.parametrize("mode", ["Recreate", "InPlaceOrRecreate", "InPlace", "Auto", None])
def test_updating_modes_manage_the_deployments_pods(mode: str | None) -> None:
    index = vpa_index([vpa("v", "Deployment", "web", mode)])
    verdict = managing_vpa(pod("ReplicaSet", "web-6d4f"), lookup, index)
    assert verdict == VpaVerdict("v", mode or "Auto", Owner("Deployment", "web"))
    assert isinstance(verdict, VpaVerdict) and "VerticalPodAutoscaler v" in verdict.message()


@pytest.mark.parametrize("mode", ["Off", "Initial"])
def test_off_and_initial_compose(mode: str) -> None:
    assert managing_vpa(pod("ReplicaSet", "web-6d4f"), lookup, vpa_index([vpa("v", "Deployment", "web", mode)])) is None


def test_other_namespace_other_target_or_kind_do_not_match() -> None:
    index = vpa_index(
        [
            vpa("a", "Deployment", "web", namespace="other"),
            vpa("b", "Deployment", "api"),
            vpa("c", "StatefulSet", "web"),
        ]
    )
    assert managing_vpa(pod("ReplicaSet", "web-6d4f"), lookup, index) is None


def test_direct_owner_and_cronjob_chain() -> None:
    index = vpa_index([vpa("s", "StatefulSet", "db"), vpa("c", "CronJob", "nightly")])
    assert managing_vpa(pod("StatefulSet", "db"), lookup, index) == VpaVerdict(
        "s", "InPlaceOrRecreate", Owner("StatefulSet", "db")
    )
    assert managing_vpa(pod("Job", "nightly-1"), lookup, index) == VpaVerdict(
        "c", "InPlaceOrRecreate", Owner("CronJob", "nightly")
    )


def test_vpa_on_the_replicaset_itself_matches() -> None:
    index = vpa_index([vpa("r", "ReplicaSet", "bare")])
    assert isinstance(managing_vpa(pod("ReplicaSet", "bare"), lookup, index), VpaVerdict)


def test_unknown_replicaset_is_unresolved_only_where_an_updating_vpa_exists() -> None:
    unknown = pod("ReplicaSet", "web-new")
    assert managing_vpa(unknown, lookup, vpa_index([vpa("v", "Deployment", "web")])) == Unresolved(
        Owner("ReplicaSet", "web-new")
    )
    assert managing_vpa(unknown, lookup, vpa_index([vpa("v", "Deployment", "web", "Off")])) is None
    assert managing_vpa(unknown, lookup, vpa_index([])) is None


def test_owner_chain_stops_at_ownerless_and_non_controller_refs() -> None:
    assert owner_chain(pod("ReplicaSet", "bare"), lookup) == ((Owner("ReplicaSet", "bare"),), True)
    assert owner_chain(pod("ReplicaSet", "web-6d4f", controller=False), lookup) == ((), True)
    assert owner_chain(pod(None), lookup) == ((), True)


def test_owner_chain_is_bounded_on_a_cycle() -> None:
    def cyclic(namespace: str, owner: Owner) -> Owner:
        return Owner("ReplicaSet", "loop")

    chain, complete = owner_chain(pod("ReplicaSet", "loop"), cyclic)
    assert complete and len(chain) == 4


def test_vpa_without_target_is_ignored() -> None:
    broken = {"metadata": {"name": "x", "namespace": "ns"}, "spec": {"targetRef": {"kind": "Deployment"}}}
    assert vpa_index([broken, {"metadata": {"name": "y", "namespace": "ns"}}]) == {}


def test_first_vpa_by_name_wins_on_a_shared_target() -> None:
    index = vpa_index([vpa("z", "Deployment", "web", "Recreate"), vpa("a", "Deployment", "web", "Auto")])
    assert index["ns"][Owner("Deployment", "web")] == ("a", "Auto")


@pytest.mark.parametrize(
    "spec",
    [
        None,
        "x",
        {"targetRef": "web"},
        {"targetRef": {"kind": 3, "name": ["web"]}},
        {"targetRef": {"kind": "Deployment", "name": "web"}, "updatePolicy": "Auto"},
        {"targetRef": {"kind": "Deployment", "name": "web"}, "updatePolicy": {"updateMode": 7}},
    ],
)
def test_malformed_vpas_match_nothing_or_default(spec: Any) -> None:
    """A CRD without VPA's schema lets anything through: it must never break the index."""
    index = vpa_index([{"metadata": {"name": "v", "namespace": "ns"}, "spec": spec}, {"metadata": "x"}, {}])
    targets = index.get("ns", {})
    assert set(targets) <= {Owner("Deployment", "web")}
    assert all(mode == "Auto" for _, mode in targets.values())


# ---- at admission: the pod as sent, no owner cache (resizer.vpa.admission_vpa_hold)


def sent(kind: str | None, name: str = "", template_hash: str | None = None, controller: bool = True) -> dict[str, Any]:
    """A pod as its controller sends it to admission (no name yet, the template hash label of a ReplicaSet's)."""
    obj = pod(kind, name, controller=controller)
    if template_hash is not None:
        obj["metadata"]["labels"] = {"app": "web", "pod-template-hash": template_hash}
    return obj


def held(obj: dict[str, Any], *vpas: dict[str, Any], namespace: str = "ns") -> str | None:
    return admission_vpa_hold(obj, namespace, vpa_index(vpas))


@pytest.mark.parametrize("kind", ["DaemonSet", "StatefulSet", "Job", "ReplicaSet", "ReplicationController", "CloneSet"])
def test_at_admission_a_vpa_on_the_pods_own_controller_holds_it(kind: str) -> None:
    why = held(sent(kind, "web"), vpa("v", kind, "web"))
    assert why is not None and "VerticalPodAutoscaler v (updateMode InPlaceOrRecreate) manages" in why
    assert f"{kind} web" in why
    assert held(sent(kind, "web"), vpa("v", kind, "api")) is None, "another of its kind never owns it"


def test_at_admission_the_deployment_is_derived_from_the_replicaset_name_and_template_hash() -> None:
    pod_of_web = sent("ReplicaSet", "web-6d4f", template_hash="6d4f")
    why = held(pod_of_web, vpa("v", "Deployment", "web", "Recreate"))
    assert why is not None and "VerticalPodAutoscaler v (updateMode Recreate) manages" in why
    assert "Deployment web" in why
    assert held(pod_of_web, vpa("v", "Deployment", "api")) is None, "another Deployment: not its"
    assert held(pod_of_web, vpa("v", "Deployment", "web-6d4f")) is None
    assert held(pod_of_web, vpa("v", "StatefulSet", "web"), vpa("c", "CronJob", "web")) is None
    assert deployment_of(pod_of_web, Owner("ReplicaSet", "web-6d4f")) == "web"


@pytest.mark.parametrize(
    "name, template_hash", [("web-6d4f", None), ("web-6d4f", "77aa"), ("6d4f", "6d4f"), ("web-6d4f", "")]
)
def test_at_admission_a_replicaset_the_pod_does_not_name_holds_it_for_any_deployment(
    name: str, template_hash: str | None
) -> None:
    obj = sent("ReplicaSet", name, template_hash=template_hash)
    assert deployment_of(obj, Owner("ReplicaSet", name)) is None
    why = held(obj, vpa("v", "Deployment", "anything"))
    assert why is not None and "may own the pod's ReplicaSet" in why and "Deployment anything" in why
    assert held(obj, vpa("v", "StatefulSet", "web")) is None, "a StatefulSet never owns a ReplicaSet"


def test_at_admission_a_job_is_held_for_any_cronjob_and_not_for_a_deployment() -> None:
    why = held(sent("Job", "nightly-28000000"), vpa("c", "CronJob", "weekly"))
    assert why is not None and "CronJob weekly" in why and "may own the pod's Job nightly-28000000" in why
    assert held(sent("Job", "nightly-1"), vpa("v", "Deployment", "nightly")) is None


@pytest.mark.parametrize(
    "owner_kind, name, template_hash",
    [("Job", "j", None), ("ReplicaSet", "rs", None), ("ReplicationController", "rc", None)],
)
def test_at_admission_a_custom_kind_may_own_any_intermediate_controller(
    owner_kind: str, name: str, template_hash: str | None
) -> None:
    why = held(sent(owner_kind, name, template_hash), vpa("r", "Rollout", "canary"))
    assert why is not None and "Rollout canary" in why


def test_at_admission_a_custom_kind_never_owns_a_derived_deployment_pod_nor_a_direct_controller() -> None:
    """The reconciler follows a Deployment's, a StatefulSet's or a DaemonSet's owner no further."""
    assert held(sent("ReplicaSet", "web-6d4f", template_hash="6d4f"), vpa("r", "Rollout", "canary")) is None
    for kind in ("StatefulSet", "DaemonSet", "CloneSet"):
        assert held(sent(kind, "db"), vpa("r", "Rollout", "canary")) is None


@pytest.mark.parametrize("mode", ["Off", "Initial"])
def test_at_admission_off_and_initial_compose(mode: str) -> None:
    for obj in (sent("ReplicaSet", "web-6d4f", template_hash="6d4f"), sent("ReplicaSet", "rs"), sent("Job", "j")):
        assert (
            held(
                obj, vpa("v", "Deployment", "web", mode), vpa("c", "CronJob", "x", mode), vpa("r", "Rollout", "y", mode)
            )
            is None
        )


def test_at_admission_only_the_pods_namespace_counts_and_a_pod_without_controller_is_never_held() -> None:
    obj = sent("ReplicaSet", "web-6d4f", template_hash="6d4f")
    assert held(obj, vpa("v", "Deployment", "web", namespace="other")) is None
    assert held(obj, vpa("v", "Deployment", "web", namespace="other"), namespace="other") is not None
    assert held(sent(None), vpa("v", "Deployment", "web"), vpa("r", "Rollout", "y")) is None
    assert held(sent("ReplicaSet", "web-6d4f", "6d4f", controller=False), vpa("v", "Deployment", "web")) is None


def test_at_admission_an_owner_of_the_pod_is_preferred_over_one_that_may_be() -> None:
    why = held(sent("Job", "nightly-1"), vpa("a", "CronJob", "nightly"), vpa("b", "Job", "nightly-1"))
    assert why is not None and why.startswith("VerticalPodAutoscaler b ") and "manages" in why


@pytest.mark.parametrize(
    "obj",
    [
        {},
        {"metadata": "x"},
        {"metadata": {"ownerReferences": ["x", None]}},
        {"metadata": {"labels": "x", "ownerReferences": [{"kind": "ReplicaSet", "name": "web-1", "controller": True}]}},
    ],
)
def test_at_admission_odd_pods_never_raise(obj: dict[str, Any]) -> None:
    held(obj, vpa("v", "Deployment", "web"))


def test_whatever_the_reconciler_finds_after_binding_was_held_at_admission() -> None:
    """The webhook's decision is a superset of the reconciler's: a pod the reconciler leaves alone
    for a VPA was never sized at admission."""
    owners = {
        ("ns", Owner("ReplicaSet", "web-6d4f")): Owner("Deployment", "web"),
        ("ns", Owner("ReplicaSet", "adopted")): Owner("Deployment", "api"),
        ("ns", Owner("ReplicaSet", "rolled-5c")): Owner("Rollout", "rolled"),
        ("ns", Owner("Job", "nightly-1")): Owner("CronJob", "nightly"),
        ("ns", Owner("Job", "step")): Owner("Workflow", "flow"),
    }
    pods = [
        sent("ReplicaSet", "web-6d4f", "6d4f"),
        sent("ReplicaSet", "adopted"),
        sent("ReplicaSet", "rolled-5c"),
        sent("Job", "nightly-1"),
        sent("Job", "step"),
        sent("StatefulSet", "db"),
        sent("DaemonSet", "agent"),
    ]
    targets = [
        ("Deployment", "web"),
        ("Deployment", "api"),
        ("Rollout", "rolled"),
        ("CronJob", "nightly"),
        ("Workflow", "flow"),
        ("StatefulSet", "db"),
        ("DaemonSet", "agent"),
        ("ReplicaSet", "adopted"),
        ("Job", "step"),
    ]
    for kind, name in targets:
        index = vpa_index([vpa("v", kind, name)])
        for obj in pods:
            after = managing_vpa(obj, lambda ns, o: owners.get((ns, o), NO_OWNER), index)
            if isinstance(after, VpaVerdict):
                assert admission_vpa_hold(obj, "ns", index) is not None, (kind, name, obj["metadata"])


def test_the_controller_is_the_one_reference_whose_controller_is_true() -> None:
    ref = {"kind": "ReplicaSet", "name": "web-6d4f"}
    meta: dict[str, Any] = {"ownerReferences": ["x", {**ref, "controller": "true"}, {**ref, "controller": True}]}
    assert controller_reference(meta) == {**ref, "controller": True}
    assert controller_owner(meta) == Owner("ReplicaSet", "web-6d4f")
    for malformed in ({}, {"ownerReferences": None}, {"ownerReferences": {"kind": "x"}}, {"ownerReferences": [ref]}):
        assert controller_reference(malformed) is None and controller_owner(malformed) is None
