"""resizer.vpa: which VerticalPodAutoscaler updates a pod's requests, through its owner chain."""
from __future__ import annotations

from typing import Any

import pytest

from resizer.vpa import NO_OWNER, Owner, Unresolved, VpaVerdict, managing_vpa, owner_chain, update_mode, vpa_index


def vpa(name: str, kind: str, target: str, mode: str | None = "InPlaceOrRecreate", namespace: str = "ns") -> dict[str, Any]:
    spec: dict[str, Any] = {"targetRef": {"apiVersion": "apps/v1", "kind": kind, "name": target}}
    if mode is not None:
        spec["updatePolicy"] = {"updateMode": mode}
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


def pod(kind: str | None, name: str = "", namespace: str = "ns", controller: bool = True) -> dict[str, Any]:
    refs = [{"kind": kind, "name": name, "controller": controller}] if kind else []
    return {"metadata": {"name": "p", "namespace": namespace, "ownerReferences": refs}}


OWNERS = {("ns", Owner("ReplicaSet", "web-6d4f")): Owner("Deployment", "web"),
          ("ns", Owner("ReplicaSet", "bare")): NO_OWNER,
          ("ns", Owner("Job", "nightly-1")): Owner("CronJob", "nightly")}


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
    assert managing_vpa(pod("ReplicaSet", "web-6d4f"), lookup, vpa_index([vpa("v", "Deployment", "web", mode)])) \
        is None


def test_other_namespace_other_target_or_kind_do_not_match() -> None:
    index = vpa_index([vpa("a", "Deployment", "web", namespace="other"), vpa("b", "Deployment", "api"),
                       vpa("c", "StatefulSet", "web")])
    assert managing_vpa(pod("ReplicaSet", "web-6d4f"), lookup, index) is None


def test_direct_owner_and_cronjob_chain() -> None:
    index = vpa_index([vpa("s", "StatefulSet", "db"), vpa("c", "CronJob", "nightly")])
    assert managing_vpa(pod("StatefulSet", "db"), lookup, index) == VpaVerdict("s", "InPlaceOrRecreate",
                                                                               Owner("StatefulSet", "db"))
    assert managing_vpa(pod("Job", "nightly-1"), lookup, index) == VpaVerdict("c", "InPlaceOrRecreate",
                                                                              Owner("CronJob", "nightly"))


def test_vpa_on_the_replicaset_itself_matches() -> None:
    index = vpa_index([vpa("r", "ReplicaSet", "bare")])
    assert isinstance(managing_vpa(pod("ReplicaSet", "bare"), lookup, index), VpaVerdict)


def test_unknown_replicaset_is_unresolved_only_where_an_updating_vpa_exists() -> None:
    unknown = pod("ReplicaSet", "web-new")
    assert managing_vpa(unknown, lookup, vpa_index([vpa("v", "Deployment", "web")])) == \
        Unresolved(Owner("ReplicaSet", "web-new"))
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


@pytest.mark.parametrize("spec", [None, "x", {"targetRef": "web"}, {"targetRef": {"kind": 3, "name": ["web"]}},
                                  {"targetRef": {"kind": "Deployment", "name": "web"}, "updatePolicy": "Auto"},
                                  {"targetRef": {"kind": "Deployment", "name": "web"}, "updatePolicy": {"updateMode": 7}}])
def test_malformed_vpas_match_nothing_or_default(spec: Any) -> None:
    """A CRD without VPA's schema lets anything through: it must never break the index."""
    index = vpa_index([{"metadata": {"name": "v", "namespace": "ns"}, "spec": spec}, {"metadata": "x"}, {}])
    targets = index.get("ns", {})
    assert set(targets) <= {Owner("Deployment", "web")}
    assert all(mode == "Auto" for _, mode in targets.values())
