"""Label selectors: matched and refused as the host does (selection/src/label_selector.rs), in its words."""

import json
from pathlib import Path

import pytest

import wasmpilot_guest as guest
from wasmpilot_guest import LabelSelector, SelectorError, WorkerError
from wasmpilot_guest.selector import debug_quoted
from wasmpilot_guest.testing import SyncTest, selected_by

FIELD = "spec.deploymentSelector"

#: The cases the host's own tests run (selection/tests/label_selector_cases.rs), and the JS SDK's.
CASES = json.loads(
    (Path(__file__).resolve().parents[2] / "selection" / "tests" / "label_selectors.json").read_text()
)


@pytest.mark.parametrize("case", CASES["matching"], ids=lambda c: json.dumps(c["selector"]))
def test_shared_cases_select_and_reject_as_the_host(case):
    selector = LabelSelector.from_json(case["selector"], CASES["field"])
    for labels in case["selects"]:
        assert selector.matches(labels), labels
    for labels in case["rejects"]:
        assert not selector.matches(labels), labels


@pytest.mark.parametrize("case", CASES["refused"], ids=lambda c: json.dumps(c["selector"])[:80])
def test_shared_cases_are_refused_in_the_hosts_words(case):
    with pytest.raises(SelectorError) as refused:
        LabelSelector.from_json(case["selector"], CASES["field"])
    assert (refused.value.field, refused.value.problem) == (case["error_field"], case["problem"])


def test_the_shared_cases_are_all_there():
    assert len(CASES["matching"]) >= 9 and len(CASES["refused"]) >= 25


def expression(key, operator, values=None):
    found = {"key": key, "operator": operator}
    if values is not None:
        found["values"] = values
    return LabelSelector.from_json({"matchExpressions": [found]})


def test_in_needs_one_of_the_values():
    s = expression("tier", "In", ["front", "back"])
    assert s.matches({"tier": "front"})
    assert s.matches({"tier": "back", "other": "x"})
    assert not s.matches({"tier": "db"})
    assert not s.matches({})


def test_not_in_holds_without_the_label():
    s = expression("track", "NotIn", ["canary"])
    assert s.matches({"track": "stable"})
    assert s.matches({})
    assert s.matches(None)
    assert not s.matches({"track": "canary"})


def test_exists_and_does_not_exist_look_at_the_key_only():
    assert expression("team", "Exists").matches({"team": ""})
    assert not expression("team", "Exists").matches({"other": "team"})
    assert expression("legacy", "DoesNotExist").matches({"team": "a"})
    assert expression("legacy", "DoesNotExist", []).matches(None)
    assert not expression("legacy", "DoesNotExist").matches({"legacy": ""})


def test_match_labels_and_match_expressions_must_all_hold():
    s = LabelSelector.from_json(
        {
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "track", "operator": "NotIn", "values": ["canary"]},
                {"key": "tier", "operator": "In", "values": ["front", "back"]},
                {"key": "legacy", "operator": "DoesNotExist"},
                {"key": "team", "operator": "Exists"},
            ],
        },
        FIELD,
    )
    base = {"app": "web", "tier": "front", "team": "a"}
    assert s.matches(base)
    assert s.matches({**base, "track": "stable"})
    assert not s.matches({**base, "track": "canary"})
    assert not s.matches({**base, "legacy": ""})
    assert not s.matches({**base, "app": "api"})
    assert not s.matches({"app": "web", "tier": "front"})
    assert not s.matches(None)


def test_the_empty_selector_matches_everything():
    for empty in ({}, {"matchLabels": None, "matchExpressions": None}, {"matchLabels": {}, "matchExpressions": []}):
        s = LabelSelector.from_json(empty)
        assert s.matches({"any": "thing"})
        assert s.matches(None)
    assert LabelSelector().matches({"any": "thing"})


@pytest.mark.parametrize(
    "selector, field, problem",
    [
        (
            {"matchExpressions": [{"key": "t", "operator": "Equals", "values": ["x"]}]},
            "spec.deploymentSelector.matchExpressions[0].operator",
            '"Equals" is not In, NotIn, Exists or DoesNotExist',
        ),
        (
            {"matchExpressions": [{"key": "t", "operator": "in", "values": ["x"]}]},
            "spec.deploymentSelector.matchExpressions[0].operator",
            '"in" is not In, NotIn, Exists or DoesNotExist',
        ),
        (
            {"matchExpressions": [{"key": "t"}]},
            "spec.deploymentSelector.matchExpressions[0].operator",
            '"" is not In, NotIn, Exists or DoesNotExist',
        ),
        (
            {"matchExpressions": [{"key": "t", "operator": "Exists"}, {"key": "t", "operator": "In"}]},
            "spec.deploymentSelector.matchExpressions[1].values",
            "must not be empty for operator In",
        ),
        (
            {"matchExpressions": [{"key": "t", "operator": "NotIn", "values": []}]},
            "spec.deploymentSelector.matchExpressions[0].values",
            "must not be empty for operator NotIn",
        ),
        (
            {"matchExpressions": [{"key": "t", "operator": "Exists", "values": ["x"]}]},
            "spec.deploymentSelector.matchExpressions[0].values",
            "must be empty for operator Exists",
        ),
        (
            {"matchExpressions": [{"key": "t", "operator": "DoesNotExist", "values": ["x"]}]},
            "spec.deploymentSelector.matchExpressions[0].values",
            "must be empty for operator DoesNotExist",
        ),
        (
            {"matchExpressions": [{"operator": "Exists"}]},
            "spec.deploymentSelector.matchExpressions[0].key",
            "must not be empty",
        ),
        ("app=web", "spec.deploymentSelector", "is not a label selector (an object with matchLabels and/or matchExpressions)"),
        (None, "spec.deploymentSelector", "is not a label selector (an object with matchLabels and/or matchExpressions)"),
    ],
)
def test_invalid_selectors_name_the_field(selector, field, problem):
    with pytest.raises(SelectorError) as raised:
        LabelSelector.from_json(selector, FIELD)
    assert (raised.value.field, raised.value.problem) == (field, problem)
    assert str(raised.value) == f"{field}: {problem}"


@pytest.mark.parametrize(
    "selector, field, problem",
    [
        ({"matchLabels": {"a": 1}}, "matchLabels", "invalid type: integer `1`, expected a string"),
        ({"matchLabels": {"b": "x", "a": None}}, "matchLabels", "invalid type: null, expected a string"),
        ({"matchLabels": ["a"]}, "matchLabels", "invalid type: sequence, expected a map"),
        ({"matchExpressions": {"key": "a"}}, "matchExpressions", "invalid type: map, expected a sequence"),
        ({"matchExpressions": ["a"]}, "matchExpressions", 'invalid type: string "a", expected LabelSelectorRequirement'),
        ({"matchExpressions": [{"key": True}]}, "matchExpressions", "invalid type: boolean `true`, expected a string"),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": [1.5]}]},
            "matchExpressions",
            "invalid type: floating point `1.5`, expected a string",
        ),
    ],
)
def test_malformed_parts_are_reported_as_the_host_parses_them(selector, field, problem):
    with pytest.raises(SelectorError) as raised:
        LabelSelector.from_json(selector)
    assert (raised.value.field, raised.value.problem) == (f"selector.{field}", problem)


def test_every_entry_is_parsed_before_any_is_checked():
    with pytest.raises(SelectorError) as raised:
        LabelSelector.from_json({"matchExpressions": [{"key": "a", "operator": "Equals"}, {"key": 7}]})
    assert raised.value.field == "selector.matchExpressions"


def test_quoted_as_rust_debug_formats_strings():
    assert debug_quoted('a"b\\c\nd\x01é') == '"a\\"b\\\\c\\nd\\u{1}é"'
    with pytest.raises(SelectorError, match=r'"in\\n" is not In'):
        expression("t", "in\n", ["x"])


class Picking(guest.PhaseWorker):
    """Selects its ConfigMaps itself, by the selector in `spec.pick`."""

    def sync(self, ctx, resource, inputs):
        try:
            selector = LabelSelector.from_json(resource["spec"].get("pick"), "spec.pick")
        except SelectorError as err:
            raise WorkerError.fatal(str(err)) from err
        picked = [c["metadata"]["name"] for c in inputs.list("configmaps") if selector.matches(c["metadata"].get("labels"))]
        return guest.Outcome.next("Done").status({"picked": picked})


class TakingAll(guest.PhaseWorker):
    """Takes every ConfigMap it is given, as a worker whose input the host selects."""

    def sync(self, ctx, resource, inputs):
        return guest.Outcome.next("Done").status({"given": [c["metadata"]["name"] for c in inputs.list("configmaps")]})


def configmap(name, labels=None, namespace=None):
    metadata = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if labels is not None:
        metadata["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}


CONFIGMAPS = [
    configmap("a", {"pick": "yes"}, "default"),
    configmap("b", {"pick": "no"}, "default"),
    configmap("c", namespace="default"),
    configmap("elsewhere", {"pick": "yes"}, "prod"),
]


def test_a_worker_selecting_by_itself():
    report = SyncTest({"spec": {"pick": {"matchLabels": {"pick": "yes"}}}}).input("configmaps", CONFIGMAPS).run(Picking())
    assert report.status == {"picked": ["a", "elsewhere"]}
    failed = SyncTest({"spec": {}}).input("configmaps", CONFIGMAPS).fail(Picking())
    assert failed.error == WorkerError.fatal(
        "spec.pick: is not a label selector (an object with matchLabels and/or matchExpressions)"
    )


def test_tests_get_what_the_host_selects():
    resource = {"metadata": {"name": "r", "namespace": "default"}, "spec": {"pick": {"matchLabels": {"pick": "yes"}}}}
    assert [c["metadata"]["name"] for c in selected_by(resource, "spec.pick", CONFIGMAPS)] == ["a"]
    report = SyncTest(resource).input_selected("configmaps", "spec.pick", CONFIGMAPS).run(TakingAll())
    assert report.status == {"given": ["a"]}


def test_tests_cannot_select_where_the_host_would_refuse():
    with pytest.raises(SelectorError, match="^spec.pick: is not set$"):
        selected_by({"spec": {}}, "spec.pick", [])
    with pytest.raises(SelectorError, match=r"^spec\.pick\.matchExpressions\[0\]\.values: must not be empty"):
        SyncTest({"spec": {"pick": {"matchExpressions": [{"key": "a", "operator": "In"}]}}}).input_selected("c", "spec.pick", [])
