//! Cycles between operators: operator A's worker outputs B's resources and B's outputs A's, so
//! each resource creates more without end; found among the running operators when one starts.
//!
//! An operator outputting its own resource kind is the definition's own matter (a sensitive use,
//! see [`crate::definition::sensitive_uses`]). Across operators the same recursion needs the
//! others' definitions, so the manager asks here before it starts one: an *edge* runs from X to
//! Y when one of X's phases outputs the kind Y manages. An edge whose kind X lists in
//! `spec.allowSensitiveKinds` is allowed (the admin said X's worker ends the recursion), and a
//! cycle with an allowed edge is too. The manager refuses the youngest operator on a cycle,
//! whichever loaded first, as it does for two operators claiming one kind.

use crate::crd::{KindRef, WasmOperatorSpec};
use crate::definition::{allows_sensitive, same_kind};
use std::collections::{HashMap, VecDeque};

/// One edge of a cycle: `operator`'s phases output `kind`, the resource kind `next` manages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CycleStep {
    pub operator: String,
    pub kind: KindRef,
    pub next: String,
}

/// Operators whose outputs create each other's resources, in order: each step's `next` is the
/// following step's `operator`, and the last one's is the first's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputCycle {
    pub steps: Vec<CycleStep>,
}

impl OutputCycle {
    /// The operators on the cycle.
    pub fn operators(&self) -> impl Iterator<Item = &str> {
        self.steps.iter().map(|s| s.operator.as_str())
    }
}

impl std::fmt::Display for OutputCycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, step) in self.steps.iter().enumerate() {
            f.write_str(if i == 0 { "WasmOperator " } else { "; " })?;
            write!(
                f,
                "{} outputs {} {}, managed by {}",
                step.operator,
                group_of(&step.kind),
                step.kind.kind,
                step.next
            )?;
        }
        Ok(())
    }
}

/// `group` of an `apiVersion` (`core` for the core group), as the message names a kind.
fn group_of(kind: &KindRef) -> &str {
    kind.api_version
        .rsplit_once('/')
        .map_or("core", |(group, _)| group)
}

/// The first kind `from` outputs that `to` manages and `from` does not allow as sensitive.
fn edge(from: &WasmOperatorSpec, to: &WasmOperatorSpec) -> Option<KindRef> {
    from.phases
        .iter()
        .flat_map(|p| p.outputs.iter().map(|o| &o.kind))
        .find(|k| same_kind(k, &to.resource) && !allows_sensitive(from, k))
        .cloned()
}

/// A cycle through operator `name` (definition `spec`) and the `others` running (`name` among
/// them is skipped: its running definition is the one being replaced), of edges none of which is
/// allowed; the shortest one, `None` when there is none. Among operators without such a cycle,
/// any new one passes through the operator being started, so this is the only place to look.
pub fn through<'a>(
    name: &'a str,
    spec: &'a WasmOperatorSpec,
    others: impl IntoIterator<Item = (&'a str, &'a WasmOperatorSpec)>,
) -> Option<OutputCycle> {
    let mut nodes: Vec<(&str, &WasmOperatorSpec)> = vec![(name, spec)];
    nodes.extend(others.into_iter().filter(|(n, _)| *n != name));
    // Breadth first from the operator started: the first edge back to it closes the shortest.
    let mut reached_from: HashMap<usize, (usize, KindRef)> = HashMap::new();
    let mut queue = VecDeque::from([0usize]);
    while let Some(at) = queue.pop_front() {
        for (to, (_, to_spec)) in nodes.iter().enumerate() {
            if to == at || (to != 0 && reached_from.contains_key(&to)) {
                continue;
            }
            let Some(kind) = edge(nodes[at].1, to_spec) else {
                continue;
            };
            if to != 0 {
                reached_from.insert(to, (at, kind));
                queue.push_back(to);
                continue;
            }
            // Back at the start: walk the path to `at` backwards.
            let mut steps = vec![CycleStep {
                operator: nodes[at].0.to_string(),
                kind,
                next: name.to_string(),
            }];
            let mut node = at;
            while node != 0 {
                let (previous, kind) = &reached_from[&node];
                steps.push(CycleStep {
                    operator: nodes[*previous].0.to_string(),
                    kind: kind.clone(),
                    next: nodes[node].0.to_string(),
                });
                node = *previous;
            }
            steps.reverse();
            return Some(OutputCycle { steps });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn operator(resource: &str, outputs: &[&str]) -> WasmOperatorSpec {
        let kind = |k: &str| KindRef::new("cycle.example.org/v1", k);
        let mut spec: WasmOperatorSpec = serde_json::from_value(serde_json::json!({
            "resource": {"apiVersion": "cycle.example.org/v1", "kind": resource},
            "phases": [{"name": "Start", "initial": true, "module": {"file": {"path": "w.wasm"}}}],
        }))
        .expect("a definition");
        spec.phases[0].outputs = outputs.iter().map(|k| kind(k).into()).collect();
        spec
    }

    #[test]
    fn two_operators_creating_each_others_resources_are_a_cycle() {
        let a = operator("A", &["B"]);
        let b = operator("B", &["A"]);
        let cycle = through("b", &b, [("a", &a)]).expect("a cycle");
        assert_eq!(cycle.operators().collect::<Vec<_>>(), ["b", "a"]);
        assert_eq!(
            cycle.to_string(),
            "WasmOperator b outputs cycle.example.org A, managed by a; \
             a outputs cycle.example.org B, managed by b"
        );
        // Without the edge back, a chain is no cycle.
        assert_eq!(through("b", &operator("B", &[]), [("a", &a)]), None);
    }

    #[test]
    fn the_shortest_cycle_through_the_started_operator_is_named() {
        let a = operator("A", &["B", "C"]);
        let b = operator("B", &["C"]);
        let c = operator("C", &["A"]);
        let d = operator("D", &["A"]);
        let cycle = through("a", &a, [("b", &b), ("c", &c), ("d", &d)]).expect("a cycle");
        assert_eq!(cycle.operators().collect::<Vec<_>>(), ["a", "c"]);
        // Three long, when that is the only one.
        let a = operator("A", &["B"]);
        let cycle = through("c", &c, [("a", &a), ("b", &b), ("d", &d)]).expect("a cycle");
        assert_eq!(cycle.operators().collect::<Vec<_>>(), ["c", "a", "b"]);
        assert_eq!(cycle.steps[2].next, "c");
    }

    #[test]
    fn an_allowed_edge_breaks_the_cycle() {
        let a = operator("A", &["B"]);
        let mut b = operator("B", &["A"]);
        b.allow_sensitive_kinds
            .push(KindRef::new("cycle.example.org/v2", "A"));
        assert_eq!(through("b", &b, [("a", &a)]), None);
        assert_eq!(through("a", &a, [("b", &b)]), None);
    }

    #[test]
    fn the_started_operators_running_definition_is_not_its_own_neighbour() {
        // `a` swaps from outputting B to outputting nothing: its old definition is no edge.
        let old_a = operator("A", &["B"]);
        let b = operator("B", &["A"]);
        assert_eq!(
            through("a", &operator("A", &[]), [("a", &old_a), ("b", &b)]),
            None
        );
        // A cycle among the others only is not this operator's to answer for.
        let c = operator("C", &[]);
        assert_eq!(through("c", &c, [("a", &old_a), ("b", &b)]), None);
    }
}
