"""The pod model (resizer.podstate): one parse of a pod's ``workload-resizer.io/*`` annotations
into a frozen record, and the patch builders that write them back."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from resizer import podstate
from resizer.eligibility import eligibility
from resizer.podstate import (
    APPLIED_AT,
    APPLIED_INSTANCE_TYPE,
    APPLIED_SIZE,
    MIRROR_POD,
    ORIGINALS_MAC,
    RESIZE_STATE,
    SIZED_AT_ADMISSION,
    SKIP,
    Applied,
    KeyCollisionError,
    Mac,
    Original,
    OriginalsError,
    ResizeState,
    Stage,
    applied_patch,
    calibration_labels,
    calibration_selector,
    carries_mac,
    controller_owned_keys,
    description_patch,
    legacy_original_key,
    mac_patch,
    mirror_and_skip,
    original_key,
    originals_removal,
    pod_original_key,
    read_state,
    resize_state_patch,
    sized_record_patch,
    skip_patch,
    strip_controller_owned,
    without_controller_owned,
)

LONG = "a-container-name-long-enough-to-be-hashed-into-its-key"
# Two names whose 8-hex legacy keys are equal (tests/unit/test_resizer_original_keys.py).
A = "payments-api-with-a-really-long-name-for-z41osl3f8"
B = "payments-api-with-a-really-long-name-for-qhtejfsi8"


def pod(annotations: Any = None, containers: Any = None, sidecars: Any = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "app"}] if containers is None else containers}
    if sidecars:
        spec["initContainers"] = [{"name": name, "restartPolicy": "Always"} for name in sidecars]
    return {"metadata": {"name": "p", "annotations": annotations}, "spec": spec}


def apply(annotations: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch of ``metadata.annotations``."""
    merged = dict(annotations)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


def test_a_pod_without_annotations_reads_as_nothing_recorded() -> None:
    state = read_state(pod())
    assert state.originals == {}
    assert state.mac is None and state.mac_value is None
    assert state.sized_at_admission is None
    assert state.resize_state is None and not state.resize_state_recorded
    assert state.applied == Applied() and not state.applied.recorded
    assert not state.skip and not state.mirror
    assert state.owned == ()
    assert state.original_keys() == {"app": {slot: original_key("app", *slot) for slot in state.pod_level}}
    assert all(not original.recorded for original in state.pod_level.values())


def test_read_state_tolerates_a_pod_with_no_metadata_or_spec() -> None:
    state = read_state({})
    assert state.original_keys() == {}
    assert read_state({"metadata": None, "spec": None}).originals == {}
    assert read_state({"metadata": {"annotations": ["not", "a", "map"]}}).owned == ()


def test_a_pod_read_again_unchanged_is_the_same_record_and_a_change_is_seen() -> None:
    """read_state hands out a pod object's record again only while what it depends on is unchanged."""
    subject = pod({original_key("app", "cpu", "request"): "1"})
    first = read_state(subject)
    assert read_state(subject) is first
    subject["metadata"]["annotations"][SKIP] = "true"  # changed in place
    second = read_state(subject)
    assert second is not first and second.skip and not first.skip
    subject["spec"]["containers"][0]["name"] = "renamed"  # the originals' keys follow the names
    third = read_state(subject)
    assert third is not second and set(third.original_keys()) == {"renamed"}
    assert not third.containers["renamed"][("cpu", "request")].recorded
    assert read_state(pod({original_key("app", "cpu", "request"): "1"})) is not first  # another pod object


@pytest.mark.parametrize(
    "annotations",
    [None, {}, {SKIP: "true"}, {SKIP: "TRUE"}, {SKIP: "yes"}, {SKIP: 1}, {MIRROR_POD: "x"}, ["not", "a", "map"]],
)
def test_mirror_and_skip_read_alone_agree_with_the_whole_state(annotations: Any) -> None:
    subject = pod(annotations)
    state = read_state(subject)
    assert mirror_and_skip(subject) == (state.mirror, state.skip)
    assert eligibility(subject) == eligibility(subject, state)


def test_the_state_is_frozen() -> None:
    state = read_state(pod())
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.skip = True  # type: ignore[misc]


def test_every_record_round_trips_through_its_patch() -> None:
    record = ResizeState(Stage.INFEASIBLE, "n4", 3, size="abc", requested_at="2026-01-01T00:00:00Z", reverted=True)
    mac = Mac("pod", "k1", "x" * 43)
    annotations: dict[str, Any] = {}
    for patch in (
        {original_key("app", "cpu", "request"): "500m", pod_original_key("memory", "limit"): "1Gi"},
        mac_patch(mac),
        sized_record_patch("c3"),
        resize_state_patch(record),
        applied_patch("n4", "2026-01-01T00:00:00Z", "0123456789abcdef"),
    ):
        annotations = apply(annotations, patch)
    state = read_state(pod(annotations))
    assert state.originals == {
        original_key("app", "cpu", "request"): "500m",
        pod_original_key("memory", "limit"): "1Gi",
    }
    assert state.containers["app"][("cpu", "request")] == Original(original_key("app", "cpu", "request"), True, "500m")
    assert state.pod_level[("memory", "limit")] == Original(pod_original_key("memory", "limit"), True, "1Gi")
    assert state.mac == mac and state.mac_value == mac.encode() == "v1.p.k1." + "x" * 43
    assert state.sized_at_admission == "c3"
    assert state.resize_state == record and state.resize_state_recorded
    assert state.applied == Applied("n4", "2026-01-01T00:00:00Z", "0123456789abcdef")
    assert [key for key, _ in state.owned] == sorted(annotations)


def test_applied_patch_clears_a_resize_state_the_pod_carries() -> None:
    recorded = read_state(pod({RESIZE_STATE: "unreadable"}))
    assert recorded.resize_state is None and recorded.resize_state_recorded
    assert applied_patch("n4", "t", "s", recorded) == {
        APPLIED_INSTANCE_TYPE: "n4",
        APPLIED_AT: "t",
        APPLIED_SIZE: "s",
        RESIZE_STATE: None,
    }
    assert RESIZE_STATE not in applied_patch("n4", "t", "s", read_state(pod()))
    assert resize_state_patch(None) == {RESIZE_STATE: None}


@pytest.mark.parametrize("scope", ["admission", "pod", "sized"])
def test_a_mac_of_each_scope_parses(scope: Any) -> None:
    mac = Mac(scope, "k20260101", "d" * 43)
    assert read_state(pod({ORIGINALS_MAC: mac.encode()})).mac == mac
    assert carries_mac(mac_patch(mac)) and not carries_mac({"k": "v"})


@pytest.mark.parametrize(
    "value",
    ["", "v1", "v2.p.k1.mac", "v1.x.k1.mac", "v1.p.k1", "v1.p.k1.mac.extra", 7, None, ["v1.p.k1.mac"], {"a": 1}],
)
def test_a_forged_mac_reads_as_none_and_keeps_its_value(value: Any) -> None:
    state = read_state(pod({ORIGINALS_MAC: value}))
    assert state.mac is None
    assert state.mac_value == value


@pytest.mark.parametrize(
    "value",
    [
        "",
        "{",
        "[]",
        '{"state": "nonsense", "nodeType": "n4"}',
        '{"state": "deferred"}',
        '{"state": "deferred", "nodeType": 4}',
        '{"state": "deferred", "nodeType": "n4", "generation": "2"}',
        12,
        {"state": "deferred"},
    ],
)
def test_a_forged_resize_state_is_ignored_not_trusted(value: Any) -> None:
    state = read_state(pod({RESIZE_STATE: value}))
    assert state.resize_state is None
    assert state.resize_state_recorded


@pytest.mark.parametrize("value", [3, None, ["n4"], {"n4": 1}])
def test_non_string_records_read_as_absent(value: Any) -> None:
    state = read_state(
        pod({SIZED_AT_ADMISSION: value, APPLIED_INSTANCE_TYPE: value, APPLIED_AT: value, APPLIED_SIZE: value})
    )
    assert state.sized_at_admission is None
    assert state.applied == Applied()


@pytest.mark.parametrize(
    ("value", "skip"), [("true", True), ("TRUE", True), ("True", True), ("false", False), ("", False), ("yes", False)]
)
def test_skip_is_true_in_any_case(value: str, skip: bool) -> None:
    assert read_state(pod({SKIP: value})).skip is skip
    assert read_state(pod(skip_patch())).skip


def test_a_mirror_pod_is_read_from_the_kubelet_s_annotation() -> None:
    assert read_state(pod({MIRROR_POD: "hash"})).mirror
    assert read_state(pod({MIRROR_POD: "hash"})).owned == ()


def test_a_long_name_is_read_under_its_legacy_key_when_only_that_is_present() -> None:
    legacy = legacy_original_key(LONG, "cpu", "request")
    written = original_key(LONG, "cpu", "request")
    assert legacy != written
    state = read_state(pod({legacy: "250m"}, [{"name": LONG}]))
    assert state.containers[LONG][("cpu", "request")] == Original(legacy, True, "250m")
    assert state.original_keys()[LONG][("cpu", "request")] == legacy
    assert state.original_keys()[LONG][("cpu", "limit")] == original_key(LONG, "cpu", "limit")
    assert state.legacy == {written: legacy}
    assert state.holds(written)
    assert state.as_recorded({written: "1"}) == {legacy: "1"}
    assert state.as_written({legacy: "1"}) == {written: "1"}


def test_the_key_written_today_wins_over_a_legacy_one() -> None:
    legacy = legacy_original_key(LONG, "cpu", "request")
    written = original_key(LONG, "cpu", "request")
    state = read_state(pod({legacy: "250m", written: "300m"}, [{"name": LONG}]))
    assert state.containers[LONG][("cpu", "request")] == Original(written, True, "300m")
    assert state.legacy == {}


def test_sidecars_have_originals_and_plain_init_containers_do_not() -> None:
    subject = pod(containers=[{"name": "app"}], sidecars=["proxy"])
    subject["spec"]["initContainers"].append({"name": "setup"})
    assert set(read_state(subject).original_keys()) == {"app", "proxy"}


def test_two_containers_of_one_name_are_refused_when_their_keys_are_asked_for() -> None:
    state = read_state(pod({APPLIED_INSTANCE_TYPE: "n4"}, [{"name": "app"}, {"name": "app"}]))
    assert state.applied.instance_type == "n4"  # everything else still reads
    assert state.containers == {}
    with pytest.raises(KeyCollisionError, match="two resizable containers are named 'app'"):
        state.original_keys()
    with pytest.raises(KeyCollisionError):  # as often as asked
        state.container_originals()


def test_a_legacy_key_two_containers_share_is_refused() -> None:
    assert legacy_original_key(A, "cpu", "request") == legacy_original_key(B, "cpu", "request")
    state = read_state(pod({legacy_original_key(A, "cpu", "request"): "1"}, [{"name": A}, {"name": B}]))
    with pytest.raises(KeyCollisionError, match="the key earlier versions wrote for long names"):
        state.original_keys()


@pytest.mark.parametrize("containers", [[{"image": "x"}], [{"name": 3}], ["app"], [None], "app", 5])
def test_odd_containers_are_a_clear_refusal_not_a_crash(containers: Any) -> None:
    state = read_state(pod({APPLIED_INSTANCE_TYPE: "n4"}, containers))
    assert state.applied.instance_type == "n4"
    with pytest.raises(OriginalsError):
        state.original_keys()


def test_originals_removal_removes_the_originals_and_the_mac() -> None:
    legacy = legacy_original_key(LONG, "cpu", "request")
    annotations = {legacy: "1", pod_original_key("cpu", "request"): "2", ORIGINALS_MAC: "forged", SKIP: "false"}
    assert originals_removal(read_state(pod(annotations, [{"name": LONG}]))) == {
        legacy: None,
        pod_original_key("cpu", "request"): None,
        ORIGINALS_MAC: None,
    }
    assert originals_removal(read_state(pod({}))) == {}


def test_stripping_removes_every_controller_owned_key_and_keeps_the_author_s() -> None:
    annotations = {
        original_key("app", "cpu", "request"): "1",
        ORIGINALS_MAC: "m",
        SIZED_AT_ADMISSION: "c3",
        RESIZE_STATE: "{}",
        APPLIED_INSTANCE_TYPE: "n4",
        APPLIED_AT: "t",
        APPLIED_SIZE: "s",
        SKIP: "true",
        "team": "a",
    }
    owned = sorted(set(annotations) - {SKIP, "team"})
    state = read_state(pod(annotations))
    assert controller_owned_keys(state) == owned
    assert strip_controller_owned(state) == {"metadata": {"annotations": dict.fromkeys(owned)}}
    assert strip_controller_owned(state, "42") == {
        "metadata": {"resourceVersion": "42", "annotations": dict.fromkeys(owned)}
    }
    assert without_controller_owned(annotations) == {SKIP: "true", "team": "a"}


def test_the_product_s_other_names_stay_under_its_prefix() -> None:
    labels = calibration_labels("run-1", "n4")
    assert all(key.startswith("workload-resizer.io/") for key in labels)
    assert calibration_selector("run-1") in {f"{key}=run-1" for key in labels}
    (key,) = description_patch("what it is")
    assert key.startswith("workload-resizer.io/")


def test_the_state_lists_its_fields() -> None:
    """Other modules read these: renaming one breaks them (add, never rename)."""
    state = read_state(pod())
    for name in (
        "originals",
        "pod_level",
        "containers",
        "legacy",
        "keys_refused",
        "mac_value",
        "mac",
        "sized_at_admission",
        "resize_state_recorded",
        "resize_state",
        "applied",
        "skip",
        "mirror",
        "owned",
    ):
        getattr(state, name)


def test_the_containers_are_mapped_once() -> None:
    state = read_state(pod({original_key("app", "cpu", "request"): "1"}))
    assert state.containers is state.containers
    assert state == read_state(pod({original_key("app", "cpu", "request"): "1"}))


# ---------------------------------------------------------------- nothing else reads a key

ROOT = Path(__file__).resolve().parents[2]
PRODUCT_PACKAGES = ("app", "reconciler", "resizer", "kube", "commands", "ops", "certs")
POD_MODEL = ("resizer/podstate.py",)
# A key under the product's prefix; an apiVersion of the product's API group
# (``workload-resizer.io/v1alpha1``, the documents the commands print) names no key.
SPELLED_KEY = re.compile(r"workload-resizer\.io/(?!v\d+(?:alpha|beta)?\d*\b)")


def key_name_constants() -> frozenset[str]:
    """The pod model's public constants that name keys (a key, or a set of keys)."""
    prefix = podstate.PREFIX

    def names_a_key(value: object) -> bool:
        if isinstance(value, str):
            return value.startswith(prefix) or value == podstate.MIRROR_POD
        return isinstance(value, frozenset | tuple | list) and any(map(names_a_key, value))

    return frozenset(
        name
        for name, value in vars(podstate).items()
        if name.isupper() and not name.startswith("_") and names_a_key(value)
    )


def product_modules() -> list[str]:
    return sorted(
        str(path.relative_to(ROOT)) for package in PRODUCT_PACKAGES for path in (ROOT / package).rglob("*.py")
    )


def key_readings(module: str, constants: frozenset[str]) -> list[str]:
    """What in ``module`` reads or writes a key other than through the pod model's functions."""
    return readings_in((ROOT / module).read_text(), constants)


def readings_in(text: str, constants: frozenset[str]) -> list[str]:
    found = [
        f"spells {match.group(0)!r} (line {text.count(chr(10), 0, match.start()) + 1})"
        for match in SPELLED_KEY.finditer(text)
    ]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("resizer"):
            found += [f"imports {alias.name} (line {node.lineno})" for alias in node.names if alias.name in constants]
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in constants
            and isinstance(node.value, ast.Name)
            and node.value.id in ("resizer", "podstate")
        ):
            found.append(f"reads {node.value.id}.{node.attr} (line {node.lineno})")
    return found


def test_the_key_name_constants_are_known() -> None:
    assert key_name_constants() >= {
        "PREFIX",
        "SKIP",
        "ORIGINALS_MAC",
        "RESIZE_STATE",
        "MIRROR_POD",
        "POD_ORIGINAL_KEYS",
    }
    assert "TOTAL_ANNOTATION_SIZE_LIMIT" not in key_name_constants()


def test_no_module_but_the_pod_model_reads_a_key() -> None:
    constants = key_name_constants()
    offenders = {
        module: readings
        for module in product_modules()
        if module not in POD_MODEL and (readings := key_readings(module, constants))
    }
    assert offenders == {}, "read and write pod annotations through resizer.podstate"


@pytest.mark.parametrize(
    ("source", "count"),
    [
        ('KEY = "workload-resizer.io/skip"', 1),
        ('HELP = "e.g. !workload-resizer.io/exclude"', 1),
        ("from resizer.podstate import SKIP", 1),
        ("from resizer import ORIGINALS_MAC as MAC", 1),
        ("import resizer\nresizer.APPLIED_AT", 1),
        ("from resizer import podstate\npodstate.POD_ORIGINAL_KEYS", 1),
        ('VERSION = "workload-resizer.io/v1alpha1"', 0),
        ("from resizer.podstate import read_state, skip_patch", 0),
        ('REASON = "SizedAtAdmission"\nSIZED_AT_ADMISSION = REASON', 0),
    ],
)
def test_the_check_finds_what_it_is_meant_to(source: str, count: int) -> None:
    """A spelled key, an imported constant and an attribute read are found; an apiVersion, the
    model's functions and a name that merely equals a constant's are not."""
    assert len(readings_in(source, key_name_constants())) == count
