//! Secret data a worker is handed never leaves in the host's words: Conditions, Events, log
//! lines, status, recordings, shadow cases and `plan` output get `[redacted]` in its place.
//!
//! A worker that declares a `v1 Secret` input reads its data (that is what it is granted for),
//! and whatever it returns as text — an error, a log line, its status info — could carry it on
//! to places more people read. The host knows every value it handed over, so it replaces each
//! (as stored, base64, and decoded) wherever the worker's text goes; recorded requests keep a
//! Secret's keys with the values replaced.

use serde_json::Value;
use std::borrow::Cow;

/// What replaces a Secret value.
pub const REDACTED: &str = "[redacted]";

/// Values shorter than this are not looked for: `1` or `true` in a Secret would otherwise blank
/// every number and flag of a message.
const MIN_VALUE_CHARS: usize = 4;

/// The Secret values one worker call was handed, longest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Redactor {
    values: Vec<String>,
}

impl Redactor {
    /// The values of every Secret among `objects` (worker JSON), as stored and decoded.
    pub fn of_objects<'a>(objects: impl IntoIterator<Item = &'a str>) -> Redactor {
        let mut values = Vec::new();
        for text in objects {
            if !maybe_secret(text) {
                continue;
            }
            let Ok(object) = serde_json::from_str::<Value>(text) else {
                continue;
            };
            if !is_secret(&object) {
                continue;
            }
            for (field, decode) in [("data", true), ("stringData", false)] {
                let Some(map) = object.get(field).and_then(Value::as_object) else {
                    continue;
                };
                for value in map.values().filter_map(Value::as_str) {
                    values.push(value.to_string());
                    if decode {
                        if let Some(decoded) = decoded(value) {
                            values.push(decoded);
                        }
                    }
                }
            }
        }
        values.retain(|v| v.chars().count() >= MIN_VALUE_CHARS);
        values.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        values.dedup();
        Redactor { values }
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// `text` with every Secret value replaced.
    pub fn text<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if !self.values.iter().any(|v| text.contains(v.as_str())) {
            return Cow::Borrowed(text);
        }
        let mut out = text.to_string();
        for v in &self.values {
            if out.contains(v.as_str()) {
                out = out.replace(v.as_str(), REDACTED);
            }
        }
        Cow::Owned(out)
    }

    /// `text` that was cut after its end (a capture full at its cap): every Secret value
    /// replaced, and an end that is the start of a value (the rest of it past the cut) too.
    pub fn text_cut_at_end(&self, text: &str) -> String {
        let mut out = self.text(text).into_owned();
        let partial = self
            .values
            .iter()
            .filter_map(|v| {
                (1..v.len())
                    .rev()
                    .filter(|&k| v.is_char_boundary(k))
                    .find(|&k| out.ends_with(&v[..k]))
            })
            .max();
        if let Some(k) = partial {
            out.truncate(out.len() - k);
            out.push_str(REDACTED);
        }
        out
    }

    /// Owned text with every Secret value replaced.
    pub fn owned(&self, text: String) -> String {
        match self.text(&text) {
            Cow::Borrowed(_) => text,
            Cow::Owned(out) => out,
        }
    }

    /// Every string of a JSON object (a worker's status info), keys included, with every
    /// Secret value replaced.
    pub fn json_map(&self, map: &mut serde_json::Map<String, Value>) {
        if self.is_empty() {
            return;
        }
        let mut value = Value::Object(std::mem::take(map));
        self.json(&mut value);
        if let Value::Object(m) = value {
            *map = m;
        }
    }

    /// Every string (keys included) in `value` with every Secret value replaced.
    pub fn json(&self, value: &mut Value) {
        if self.is_empty() {
            return;
        }
        match value {
            Value::String(s) => {
                if let Cow::Owned(out) = self.text(s) {
                    *s = out;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.json(v)),
            Value::Object(map) => {
                let entries = std::mem::take(map);
                for (key, mut v) in entries {
                    self.json(&mut v);
                    map.insert(self.owned(key), v);
                }
            }
            _ => {}
        }
    }
}

/// A cheap first look: only objects that may be Secrets are parsed.
fn maybe_secret(text: &str) -> bool {
    text.contains("\"Secret\"")
}

fn is_secret(object: &Value) -> bool {
    object["kind"] == "Secret" && object["apiVersion"] == "v1"
}

fn decoded(base64_value: &str) -> Option<String> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(base64_value)
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// `objects` (worker JSON) with each Secret's `data` and `stringData` values replaced by
/// [`REDACTED`], its keys kept: what recordings and shadow cases store.
pub fn without_secret_data(objects: &mut [String]) {
    for text in objects.iter_mut() {
        if !maybe_secret(text) {
            continue;
        }
        let Ok(mut object) = serde_json::from_str::<Value>(text) else {
            continue;
        };
        if !is_secret(&object) {
            continue;
        }
        redact_secret_object(&mut object);
        if let Ok(out) = serde_json::to_string(&object) {
            *text = out;
        }
    }
}

/// A Secret object's `data` and `stringData` values replaced by [`REDACTED`], keys kept.
pub fn redact_secret_object(object: &mut Value) {
    for field in ["data", "stringData"] {
        if let Some(map) = object.get_mut(field).and_then(Value::as_object_mut) {
            for v in map.values_mut() {
                *v = Value::String(REDACTED.into());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn secret() -> String {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
               "data": {"password": "aHVudGVyMg==", "flag": "MQ=="},
               "stringData": {"token": "s3cr3t-token"}})
        .to_string()
    }

    #[test]
    fn every_form_of_a_secret_value_is_replaced_in_text_and_json() {
        let config_map =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "not-secret"}})
                .to_string();
        let r = Redactor::of_objects([secret().as_str(), config_map.as_str()]);
        assert_eq!(
            r.text("stored aHVudGVyMg==, decoded hunter2, given s3cr3t-token, not-secret"),
            "stored [redacted], decoded [redacted], given [redacted], not-secret"
        );
        assert_eq!(
            r.text("flag 1 stays: short values are not looked for"),
            "flag 1 stays: short values are not looked for"
        );
        let mut status = json!({"copied": {"hunter2": ["x hunter2 y", 3]}});
        r.json(&mut status);
        assert_eq!(
            status,
            json!({"copied": {"[redacted]": ["x [redacted] y", 3]}})
        );
        assert!(Redactor::of_objects([config_map.as_str()]).is_empty());
    }

    #[test]
    fn a_value_cut_by_a_capture_cap_is_replaced_in_part_too() {
        let r = Redactor::of_objects([secret().as_str()]);
        // The capture stopped inside "s3cr3t-token": its start is the start of a value.
        assert_eq!(r.text_cut_at_end("token: s3cr3t-to"), "token: [redacted]");
        assert_eq!(
            r.text_cut_at_end("hunter2 then s3"),
            "[redacted] then [redacted]"
        );
        assert_eq!(r.text_cut_at_end("nothing secret"), "nothing secret");
        assert_eq!(
            Redactor::default().text_cut_at_end("s3cr3t-to"),
            "s3cr3t-to"
        );
    }

    #[test]
    fn recorded_secrets_keep_their_keys_only() {
        let mut objects = vec![secret(), json!({"kind": "ConfigMap"}).to_string()];
        without_secret_data(&mut objects);
        let s: Value = serde_json::from_str(&objects[0]).expect("json");
        assert_eq!(
            s["data"],
            json!({"password": "[redacted]", "flag": "[redacted]"})
        );
        assert_eq!(s["stringData"], json!({"token": "[redacted]"}));
        assert_eq!(s["metadata"]["name"], "db");
        assert_eq!(objects[1], json!({"kind": "ConfigMap"}).to_string());
    }
}
