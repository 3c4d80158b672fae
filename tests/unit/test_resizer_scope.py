"""One namespace scope for the webhook and the reconciler."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from resizer.scope import NamespaceScope, Requirement, ScopeError, namespace_scope, parse_label_selector


def test_kube_system_and_the_products_namespace_are_always_excluded() -> None:
    scope = namespace_scope("workload-resizer-system")
    assert not scope.includes("kube-system")
    assert not scope.includes("workload-resizer-system")
    assert scope.includes("default")


def test_admin_names_are_excluded_too() -> None:
    scope = namespace_scope("wr", ["monitoring", " batch ", ""])
    assert scope.excluded == {"kube-system", "wr", "monitoring", "batch"}
    assert scope.exclusion("monitoring") == "namespace monitoring is excluded"


def test_the_selector_is_matched_against_the_namespace_labels() -> None:
    scope = namespace_scope("wr", selector="!workload-resizer.io/exclude,env notin (dev)")
    assert scope.needs_labels
    assert scope.includes("shop", {"env": "prod"})
    assert scope.includes("shop", {})
    assert not scope.includes("shop", {"env": "dev"})
    assert scope.exclusion("shop", {"workload-resizer.io/exclude": "true"}) == (
        "namespace shop does not match '!workload-resizer.io/exclude'"
    )


def test_a_selector_without_known_labels_excludes_rather_than_guesses() -> None:
    assert not namespace_scope("wr", selector="team=a").includes("shop", None)


def test_the_namespace_name_label_is_implied_as_on_the_apiserver() -> None:
    scope = namespace_scope("wr", selector="kubernetes.io/metadata.name in (a,b)")
    assert scope.includes("a", {}) and not scope.includes("c", {})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ()),
        ("a=b", (Requirement("a", "In", ("b",)),)),
        ("a==b", (Requirement("a", "In", ("b",)),)),
        ("a!=b", (Requirement("a", "NotIn", ("b",)),)),
        ("example.com/tier in (x, y)", (Requirement("example.com/tier", "In", ("x", "y")),)),
        (
            "a notin (x),b,!c",
            (Requirement("a", "NotIn", ("x",)), Requirement("b", "Exists"), Requirement("c", "DoesNotExist")),
        ),
    ],
)
def test_kubectl_selector_syntax(text: str, expected: tuple[Requirement, ...]) -> None:
    assert parse_label_selector(text) == expected


@pytest.mark.parametrize("text", ["a=", "=b", "a in ()", "a in (x", "a,,b", "a b", "a in (x y)", "!", ","])
def test_bad_selectors_are_rejected(text: str) -> None:
    if text == "a=":  # an empty value is valid Kubernetes syntax
        assert parse_label_selector(text) == (Requirement("a", "In", ("",)),)
        return
    with pytest.raises(ScopeError):
        parse_label_selector(text)


def test_bad_namespace_names_are_rejected() -> None:
    with pytest.raises(ScopeError):
        namespace_scope("wr", ["Not_A_Namespace!"])


def test_the_webhook_selector_expresses_the_same_scope() -> None:
    scope = namespace_scope("wr", ["monitoring"], "team in (a,b),!skip")
    assert scope.webhook_namespace_selector() == {
        "matchExpressions": [
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", "monitoring", "wr"]},
            {"key": "team", "operator": "In", "values": ["a", "b"]},
            {"key": "skip", "operator": "DoesNotExist"},
        ]
    }


def selector_matches(selector: dict, name: str, labels: dict[str, str]) -> bool:
    """Kubernetes' own evaluation of a matchExpressions-only LabelSelector (the apiserver's view)."""
    full = {**labels, "kubernetes.io/metadata.name": name}
    for e in selector["matchExpressions"]:
        op, key, values = e["operator"], e["key"], e.get("values", [])
        ok = {
            "In": key in full and full[key] in values,
            "NotIn": not (key in full and full[key] in values),
            "Exists": key in full,
            "DoesNotExist": key not in full,
        }[op]
        if not ok:
            return False
    return True


names = st.sampled_from(["kube-system", "wr", "a", "b", "monitoring"])
label_sets = st.dictionaries(st.sampled_from(["team", "skip", "env"]), st.sampled_from(["a", "b", "dev"]))


@given(names, label_sets, st.sampled_from(["", "team in (a,b)", "!skip", "env!=dev,team", "team=a,!env"]))
def test_reconciler_and_webhook_views_agree(name: str, labels: dict[str, str], selector: str) -> None:
    scope = namespace_scope("wr", ["monitoring"], selector)
    assert scope.includes(name, labels) == selector_matches(scope.webhook_namespace_selector(), name, labels)


def test_selector_text_round_trips() -> None:
    scope = namespace_scope("wr", selector="a in (x,y),!b,c,d!=e")
    assert parse_label_selector(scope.selector_text()) == scope.selector


def test_default_scope() -> None:
    assert NamespaceScope().excluded == {"kube-system"}
