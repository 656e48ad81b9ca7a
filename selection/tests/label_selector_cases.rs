//! The label-selector cases every implementation runs (tests/label_selectors.json: the Python
//! and JavaScript SDKs' tests read the same file): selected, rejected, refused in these words.

use serde_json::Value;
use std::collections::BTreeMap;
use wasmpilot_selection::LabelSelector;

fn cases() -> Value {
    // Where `cargo test` runs it from (a build shared between checkouts may have been compiled
    // in another one), else where it was compiled.
    let dir = std::env::var("CARGO_MANIFEST_DIR")
        .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string());
    let path = format!("{dir}/tests/label_selectors.json");
    let text = std::fs::read_to_string(&path).expect("the shared cases");
    serde_json::from_str(&text).expect("the shared cases are JSON")
}

fn labels(value: &Value) -> Option<BTreeMap<String, String>> {
    (!value.is_null()).then(|| serde_json::from_value(value.clone()).expect("labels"))
}

#[test]
fn selectors_select_and_reject_as_the_cases_say() {
    let cases = cases();
    let field = cases["field"].as_str().expect("field");
    let matching = cases["matching"].as_array().expect("matching");
    assert!(matching.len() >= 9, "the cases are all there");
    for case in matching {
        let selector = LabelSelector::from_json(&case["selector"], field)
            .unwrap_or_else(|e| panic!("{}: {e}", case["selector"]));
        for (key, expected) in [("selects", true), ("rejects", false)] {
            for object in case[key].as_array().expect(key) {
                assert_eq!(
                    selector.matches(labels(object).as_ref()),
                    expected,
                    "{} {key} {object}",
                    case["selector"]
                );
            }
        }
    }
}

#[test]
fn invalid_selectors_are_refused_in_the_cases_words() {
    let cases = cases();
    let field = cases["field"].as_str().expect("field");
    let refused = cases["refused"].as_array().expect("refused");
    assert!(refused.len() >= 25, "the cases are all there");
    for case in refused {
        let error = LabelSelector::from_json(&case["selector"], field)
            .expect_err(&case["selector"].to_string());
        assert_eq!(error.field, case["error_field"], "{}", case["selector"]);
        assert_eq!(error.problem, case["problem"], "{}", case["selector"]);
    }
}
