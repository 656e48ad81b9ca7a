//! The dashboard's HTML, rendered on the server from the overview (no build step, no CDN): the
//! operators page, one resource's timeline, and the small script that refreshes either in place.

use std::fmt::Write as _;

use super::overview::{ConditionView, OperatorOverview, ResourceDetail};
use crate::authoring::graph::escape_markup as esc;

const STYLE: &str = r#"
body { font-family: system-ui, sans-serif; margin: 0; color: #1d2330; background: #fafbfc; }
header { background: #1d2330; color: #fff; padding: 10px 20px; display: flex; gap: 20px; align-items: baseline; }
header h1 { font-size: 18px; margin: 0; }
header a { color: #fff; }
#updated { font-size: 12px; opacity: .8; }
#error { color: #ffb3b3; font-size: 13px; }
main { padding: 10px 20px; }
section.operator { background: #fff; border: 1px solid #d9dde3; border-radius: 8px; padding: 10px 16px; margin: 12px 0; }
h2 { font-size: 17px; margin: 6px 0; }
h2 small { font-weight: normal; color: #555; }
h3 { font-size: 14px; margin: 12px 0 4px; }
table { border-collapse: collapse; font-size: 13px; }
td, th { border-bottom: 1px solid #e4e7eb; padding: 3px 10px 3px 0; text-align: left; vertical-align: top; }
.badge { font-size: 12px; padding: 1px 6px; border-radius: 4px; font-weight: normal; }
.ok { background: #d8f3dc; } .bad { background: #ffd6d6; } .warn { background: #fff1c2; }
.error { color: #a00; }
.graph { overflow-x: auto; }
ul.conditions { margin: 0; padding-left: 16px; }
ol.timeline { list-style: none; padding-left: 0; border-left: 3px solid #8aa; margin-left: 8px; }
ol.timeline li { margin: 0 0 10px 0; padding-left: 12px; position: relative; font-size: 13px; }
ol.timeline li::before { content: ""; position: absolute; left: -8px; top: 4px; width: 11px; height: 11px; border-radius: 50%; background: #8aa; }
code { font-size: 12px; }
"#;

/// Replaces `<main>` with the same page's fragment every few seconds; says when the cluster
/// could not be read, keeping the last view.
const LIVE_SCRIPT: &str = r#"
(function () {
  const main = document.querySelector('main');
  const updated = document.getElementById('updated');
  const error = document.getElementById('error');
  async function refresh() {
    try {
      const url = new URL(location.href);
      url.searchParams.set('fragment', '1');
      const response = await fetch(url, { cache: 'no-store' });
      if (!response.ok) throw new Error(response.status + ' ' + (await response.text()).slice(0, 300));
      main.innerHTML = await response.text();
      updated.textContent = 'updated ' + new Date().toLocaleTimeString();
      updated.dataset.refreshes = String(Number(updated.dataset.refreshes || '0') + 1);
      error.textContent = '';
    } catch (e) {
      error.textContent = 'could not refresh: ' + e.message;
    }
  }
  setInterval(refresh, REFRESH_MS);
})();
"#;

/// A whole page around `body` (the fragment `?fragment=1` returns alone).
pub fn document(title: &str, body: &str, refresh_ms: u64) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title>\
         <meta name=\"viewport\" content=\"width=device-width\"><style>{STYLE}</style></head>\
         <body><header><h1><a href=\"/\">wasmpilot</a></h1><span id=\"updated\" data-refreshes=\"0\">live, every {secs} s</span>\
         <span id=\"error\"></span></header>\n<main>{body}</main>\n<script>{script}</script></body></html>\n",
        title = esc(title),
        secs = refresh_ms as f64 / 1000.0,
        script = LIVE_SCRIPT.replace("REFRESH_MS", &refresh_ms.to_string()),
    )
}

/// A path segment: Kubernetes names are already safe; anything else is percent-encoded.
pub fn segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Where a resource's page is; cluster-scoped resources have namespace `-`.
pub fn resource_href(operator: &str, namespace: Option<&str>, name: &str) -> String {
    format!(
        "/operators/{}/resources/{}/{}",
        segment(operator),
        segment(namespace.unwrap_or("-")),
        segment(name)
    )
}

fn qualified(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

fn duration(seconds: u64) -> String {
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

fn conditions_list(conditions: &[ConditionView]) -> String {
    let mut out = String::from("<ul class=\"conditions\">");
    for c in conditions {
        let class = match (c.type_.as_str(), c.status.as_str()) {
            ("Stalled", "True") | ("Synced", "False") | ("Ready", "False") => "bad",
            ("Ready", "True") | ("Synced", "True") => "ok",
            _ => "",
        };
        let _ = write!(
            out,
            "<li data-condition=\"{t}\"><span class=\"badge {class}\"><b>{t}</b> {s}</span> {r}{sep}{m}</li>",
            t = esc(&c.type_),
            s = esc(&c.status),
            r = esc(&c.reason),
            sep = if c.message.is_empty() { "" } else { ": " },
            m = esc(&c.message),
        );
    }
    out.push_str("</ul>");
    out
}

fn operator_section(out: &mut String, o: &OperatorOverview) {
    let _ = write!(
        out,
        "<section class=\"operator\" data-operator=\"{n}\"><h2>{n} <small>{r}</small> ",
        n = esc(&o.name),
        r = esc(&o.resource)
    );
    match &o.ready {
        Some(c) => {
            let class = if c.status == "True" { "ok" } else { "bad" };
            let _ = write!(
                out,
                "<span class=\"badge {class}\" title=\"{m}\">Ready {s} · {r}</span>",
                m = esc(&c.message),
                s = esc(&c.status),
                r = esc(&c.reason)
            );
            if c.status != "True" && !c.message.is_empty() {
                let _ = write!(out, "</h2><p class=\"error\">{}</p>", esc(&c.message));
            } else {
                out.push_str("</h2>");
            }
        }
        None => out.push_str("<span class=\"badge warn\">no status yet</span></h2>"),
    }
    if let Some(e) = &o.definition_error {
        let _ = write!(
            out,
            "<p class=\"error\" data-definition-error>definition not valid: {}</p></section>",
            esc(e)
        );
        return;
    }
    if let Some(e) = &o.list_error {
        let _ = write!(
            out,
            "<p class=\"error\" data-list-error>could not list its resources: {}</p>",
            esc(e)
        );
    }
    if let Some(svg) = &o.graph_svg {
        let _ = write!(out, "<div class=\"graph\">{svg}</div>");
    }
    out.push_str("<table class=\"phases\"><tr><th>Phase</th><th>Resources</th></tr>");
    for p in &o.phases {
        let kind = match (p.is_final, p.ready) {
            (true, _) => " <small>final</small>",
            (false, true) => " <small>ready</small>",
            _ => "",
        };
        let _ = write!(
            out,
            "<tr><td>{n}{kind}</td><td data-phase-count=\"{n}\">{c}</td></tr>",
            n = esc(&p.name),
            c = p.count
        );
    }
    let _ = write!(
        out,
        "<tr><td><i>in a phase not declared</i></td><td data-unphased>{}</td></tr>\
         <tr><th>total</th><th data-total>{}</th></tr></table>",
        o.unphased, o.total
    );
    let _ = write!(
        out,
        "<h3>Needs attention: <span data-attention-total>{}</span></h3>",
        o.attention_total
    );
    if o.attention.is_empty() {
        out.push_str("<p>none: every resource is progressing, ready or final</p>");
    } else {
        out.push_str(
            "<table class=\"attention\"><tr><th>Resource</th><th>Phase</th><th>Why</th><th>In phase</th><th>Conditions</th></tr>",
        );
        for r in &o.attention {
            let q = qualified(r.namespace.as_deref(), &r.name);
            let _ = write!(
                out,
                "<tr data-resource=\"{qe}\" data-attention=\"{why}\"><td><a href=\"{href}\">{qe}</a></td><td>{phase}</td>\
                 <td><span class=\"badge {class}\">{why}</span></td><td>{since}</td><td>{conds}</td></tr>",
                qe = esc(&q),
                href = esc(&resource_href(&o.name, r.namespace.as_deref(), &r.name)),
                phase = esc(&r.phase),
                why = r.attention.label(),
                class = if r.attention == super::overview::Attention::Stuck { "warn" } else { "bad" },
                since = r.in_phase_seconds.map(duration).unwrap_or_default(),
                conds = conditions_list(&r.conditions),
            );
        }
        out.push_str("</table>");
        if o.attention_total > o.attention.len() {
            let _ = write!(
                out,
                "<p>… and {} more</p>",
                o.attention_total - o.attention.len()
            );
        }
    }
    if !o.shadows.is_empty() {
        out.push_str(
            "<h3>Shadow modules</h3><table class=\"shadows\"><tr><th>Phase</th><th>Module</th><th>Same</th><th>Different</th><th>Errors</th><th>Agreement</th><th>Last difference</th></tr>",
        );
        for s in &o.shadows {
            let runs = s.same + s.different + s.errors;
            let agreement = if runs == 0 {
                "no runs yet".to_string()
            } else {
                format!("{:.1} %", s.same as f64 * 100.0 / runs as f64)
            };
            let module = match (&s.module, &s.message) {
                (Some(m), _) => format!("<code>{}</code>", esc(m)),
                (None, Some(msg)) => format!("<span class=\"error\">{}</span>", esc(msg)),
                (None, None) => String::new(),
            };
            let _ = write!(
                out,
                "<tr data-shadow=\"{p}\"><td>{p}</td><td>{module}</td><td data-same>{}</td><td data-different>{}</td><td data-errors>{}</td><td data-agreement>{agreement}</td><td>{}</td></tr>",
                s.same,
                s.different,
                s.errors,
                esc(s.last_difference.as_deref().unwrap_or("")),
                p = esc(&s.phase),
            );
        }
        out.push_str("</table>");
    }
    out.push_str("</section>");
}

/// The operators page's content.
pub fn overview_fragment(operators: &[OperatorOverview]) -> String {
    let mut out = String::new();
    if operators.is_empty() {
        out.push_str(
            "<p data-no-operators>No WasmOperator in this cluster yet: <code>wasmpilot deploy &lt;dir&gt;</code> or <code>kubectl apply -f operator.yaml</code>.</p>",
        );
    }
    for o in operators {
        operator_section(&mut out, o);
    }
    out
}

/// One resource's content: Conditions and its phase history as a timeline.
pub fn resource_fragment(d: &ResourceDetail) -> String {
    let q = qualified(d.namespace.as_deref(), &d.name);
    let mut out = format!(
        "<section class=\"operator\" data-resource-page=\"{qe}\"><h2>{qe} <small>managed by {op}</small></h2>\
         <p>phase <b data-phase>{phase}</b>, generation {generation}</p><h3>Conditions</h3>{conds}\
         <h3>History (oldest first)</h3>",
        qe = esc(&q),
        op = esc(&d.operator),
        phase = esc(&d.phase),
        generation = d.generation.map(|g| g.to_string()).unwrap_or_default(),
        conds = conditions_list(&d.conditions),
    );
    if d.history.is_empty() {
        out.push_str("<p>no transition recorded yet</p>");
    } else {
        out.push_str("<ol class=\"timeline\">");
        for t in &d.history {
            let _ = write!(
                out,
                "<li data-transition data-to=\"{to}\"><b>{from} → {to}</b> at <time>{time}</time>{generation}<br>\
                 module <code data-module>{module}</code><br>inputs <code data-input-hash>{inputs}</code><br>\
                 {applied} applied, {pruned} pruned</li>",
                from = esc(&t.from),
                to = esc(&t.to),
                time = esc(&t.time),
                generation = t
                    .generation
                    .map(|g| format!(", generation {g}"))
                    .unwrap_or_default(),
                module = esc(t.module.as_deref().unwrap_or("(the host)")),
                inputs = esc(t.input_hash.as_deref().unwrap_or("")),
                applied = t.applied,
                pruned = t.pruned,
            );
        }
        out.push_str("</ol>");
    }
    out.push_str("</section>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dashboard::overview::{Attention, PhaseCount, ResourceRow};

    #[test]
    fn cluster_text_is_escaped_everywhere() {
        let hostile = "<script>alert(1)</script>";
        let o = OperatorOverview {
            name: "op".into(),
            resource: hostile.into(),
            ready: None,
            definition_error: None,
            list_error: Some(hostile.into()),
            phases: vec![PhaseCount {
                name: "P".into(),
                is_final: false,
                ready: false,
                count: 2,
            }],
            unphased: 0,
            total: 2,
            attention: vec![ResourceRow {
                namespace: Some("ns".into()),
                name: "r".into(),
                phase: "P".into(),
                attention: Attention::Stalled,
                in_phase_seconds: Some(90),
                conditions: vec![ConditionView {
                    type_: "Stalled".into(),
                    status: "True".into(),
                    reason: "Refused".into(),
                    message: hostile.into(),
                    last_transition_time: String::new(),
                }],
            }],
            attention_total: 1,
            shadows: vec![],
            graph_svg: None,
        };
        let html = overview_fragment(&[o]);
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(html.contains("data-phase-count=\"P\">2<"));
        assert!(html.contains("href=\"/operators/op/resources/ns/r\""));
        assert!(html.contains("data-attention=\"stalled\""));
    }

    #[test]
    fn names_become_safe_paths() {
        assert_eq!(
            resource_href("op", None, "a b/c"),
            "/operators/op/resources/-/a%20b%2Fc"
        );
    }
}
