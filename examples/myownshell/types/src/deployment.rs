//! The Deployment a MyOwnShell stands for, and how to tell whether the one in the cluster
//! still is that Deployment. Syncing applies [`desired_deployment`]; Ready compares it with
//! the observed one through [`differences`], so the two phases cannot disagree.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use crate::{MyOwnShell, MAX_SIZE};

/// The container of every shell pod.
pub const CONTAINER: &str = "shell";

/// The pod label (and Deployment selector) naming the MyOwnShell: `app: <name>`.
pub const APP_LABEL: &str = "app";

/// On every Deployment this operator creates; the Ready phase's input selects on it.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "myownshell";

/// Why a MyOwnShell cannot be turned into a Deployment. Permanent until the resource changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidSpec(pub String);

impl fmt::Display for InvalidSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidSpec {}

/// The command of the shell container: say hello, then stay up for an hour (the pod restarts
/// after that) so there is something to `kubectl exec` into.
pub fn shell_command() -> Vec<String> {
    [
        "sh",
        "-c",
        "echo The shell is up: kubectl exec -it into this pod && exec sleep 3600",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// The Deployment for `shell`: named after it, in its namespace, `spec.size` replicas of
/// `spec.image` running [`shell_command`], pods labelled and selected by `app: <name>`.
///
/// # Errors
/// When the name does not fit a label value (more than 63 characters), `spec.size` is outside
/// 0..=10, or `spec.image` is empty or contains whitespace. The CRD schema rejects most of
/// these already; the check keeps a worker from applying nonsense if the schema is older.
pub fn desired_deployment(shell: &MyOwnShell) -> Result<Deployment, InvalidSpec> {
    let name = shell
        .metadata
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| InvalidSpec("the MyOwnShell has no metadata.name".into()))?;
    if name.len() > 63 {
        return Err(InvalidSpec(format!(
            "metadata.name {name:?} is longer than 63 characters, so it cannot be the value of the pods' `{APP_LABEL}` label"
        )));
    }
    let size = shell.spec.size;
    if !(0..=MAX_SIZE).contains(&size) {
        return Err(InvalidSpec(format!(
            "spec.size is {size}; it must be between 0 and {MAX_SIZE}"
        )));
    }
    let image = shell.spec.image.as_str();
    if image.is_empty() || image.chars().any(char::is_whitespace) {
        return Err(InvalidSpec(format!(
            "spec.image {image:?} is not an image reference"
        )));
    }

    let selector = BTreeMap::from([(APP_LABEL.to_owned(), name.to_owned())]);
    let mut labels = selector.clone();
    labels.insert("app.kubernetes.io/name".into(), "myownshell".into());
    labels.insert("app.kubernetes.io/instance".into(), name.to_owned());
    labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY.into());
    Ok(Deployment {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: shell.metadata.namespace.clone(),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        spec: Some(DeploymentSpec {
            replicas: Some(size),
            selector: LabelSelector {
                match_labels: Some(selector.clone()),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(selector),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: CONTAINER.to_owned(),
                        image: Some(image.to_owned()),
                        command: Some(shell_command()),
                        // Explicitly none: the operator owns the container's port list, so a
                        // port added by hand is a difference Syncing takes out again.
                        ports: Some(Vec::new()),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    })
}

/// The Deployment of `desired`'s name and namespace among `deployments`, if there is one.
pub fn find_deployment<'a>(
    desired: &Deployment,
    deployments: &'a [Deployment],
) -> Option<&'a Deployment> {
    deployments.iter().find(|d| {
        d.metadata.name == desired.metadata.name
            && (d.metadata.namespace.is_none()
                || desired.metadata.namespace.is_none()
                || d.metadata.namespace == desired.metadata.namespace)
    })
}

/// How `observed` differs from `desired` in what the operator sets, one line per difference
/// (empty: in sync). Defaults the API server fills in (strategy, pull policy, …) and fields
/// others add (more labels, annotations) are not differences. With `owner_uid`, an observed
/// Deployment that is not controlled by that object is a difference too.
pub fn differences(
    desired: &Deployment,
    observed: &Deployment,
    owner_uid: Option<&str>,
) -> Vec<String> {
    let mut diffs = Vec::new();
    if let Some(uid) = owner_uid {
        let controlled = observed
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.uid == uid && o.controller == Some(true));
        if !controlled {
            diffs.push("it is not controlled by this MyOwnShell".to_owned());
        }
    }
    if let Some(missing) = missing_labels(
        desired.metadata.labels.as_ref(),
        observed.metadata.labels.as_ref(),
    ) {
        diffs.push(format!("metadata.labels lack {missing}"));
    }
    let (Some(want), Some(have)) = (&desired.spec, &observed.spec) else {
        if observed.spec.is_none() {
            diffs.push("it has no spec".to_owned());
        }
        return diffs;
    };
    // The API server defaults an unset spec.replicas to 1.
    let (want_replicas, have_replicas) = (want.replicas.unwrap_or(1), have.replicas.unwrap_or(1));
    if want_replicas != have_replicas {
        diffs.push(format!(
            "spec.replicas is {have_replicas}, want {want_replicas}"
        ));
    }
    if want.selector.match_labels != have.selector.match_labels {
        diffs.push(format!(
            "spec.selector.matchLabels is {}, want {}",
            show_labels(have.selector.match_labels.as_ref()),
            show_labels(want.selector.match_labels.as_ref())
        ));
    }
    let pod_labels = |t: &PodTemplateSpec| t.metadata.as_ref().and_then(|m| m.labels.clone());
    if let Some(missing) = missing_labels(
        pod_labels(&want.template).as_ref(),
        pod_labels(&have.template).as_ref(),
    ) {
        diffs.push(format!("the pod template's labels lack {missing}"));
    }
    let container = |t: &PodTemplateSpec| {
        t.spec
            .as_ref()
            .and_then(|s| s.containers.iter().find(|c| c.name == CONTAINER))
            .cloned()
    };
    match (container(&want.template), container(&have.template)) {
        (Some(want), Some(have)) => {
            if want.image != have.image {
                diffs.push(format!(
                    "container {CONTAINER} runs image {}, want {}",
                    have.image.as_deref().unwrap_or("(none)"),
                    want.image.as_deref().unwrap_or("(none)")
                ));
            }
            if want.command != have.command {
                diffs.push(format!("container {CONTAINER} runs another command"));
            }
            let ports = |c: &Container| -> Vec<i32> {
                let mut p: Vec<i32> = c.ports.iter().flatten().map(|p| p.container_port).collect();
                p.sort_unstable();
                p
            };
            if ports(&want) != ports(&have) {
                diffs.push(format!(
                    "container {CONTAINER} has ports {:?}, want {:?}",
                    ports(&have),
                    ports(&want)
                ));
            }
        }
        (Some(_), None) => diffs.push(format!("it has no container {CONTAINER}")),
        (None, _) => {}
    }
    diffs
}

/// The `key=value` pairs of `want` that `have` lacks or has with another value, if any.
fn missing_labels(
    want: Option<&BTreeMap<String, String>>,
    have: Option<&BTreeMap<String, String>>,
) -> Option<String> {
    let missing: Vec<String> = want
        .into_iter()
        .flatten()
        .filter(|(k, v)| have.and_then(|h| h.get(*k)) != Some(*v))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    (!missing.is_empty()).then(|| missing.join(","))
}

fn show_labels(labels: Option<&BTreeMap<String, String>>) -> String {
    let pairs: Vec<String> = labels
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    format!("{{{}}}", pairs.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MyOwnShellSpec, DEFAULT_IMAGE};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn shell(name: &str, size: i32, image: &str) -> MyOwnShell {
        let mut shell = MyOwnShell::new(
            name,
            MyOwnShellSpec {
                size,
                image: image.to_owned(),
            },
        );
        shell.metadata.namespace = Some("default".into());
        shell.metadata.uid = Some("uid-1".into());
        shell
    }

    /// `desired` as the API server would return it: owned, defaulted, with status.
    fn observed(desired: &Deployment) -> Deployment {
        let mut d = desired.clone();
        d.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "shell.examples.io/v1".into(),
            kind: "MyOwnShell".into(),
            name: "sample".into(),
            uid: "uid-1".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]);
        let labels = d.metadata.labels.get_or_insert_with(BTreeMap::new);
        labels.insert("wasmpilot.io/operator".into(), "myownshell".into());
        let spec = d.spec.as_mut().unwrap();
        spec.revision_history_limit = Some(10);
        let pod = spec.template.spec.as_mut().unwrap();
        pod.restart_policy = Some("Always".into());
        pod.containers[0].image_pull_policy = Some("IfNotPresent".into());
        d
    }

    #[test]
    fn builds_the_tutorial_deployment() {
        let d = desired_deployment(&shell("sample", 3, DEFAULT_IMAGE)).unwrap();
        assert_eq!(d.metadata.name.as_deref(), Some("sample"));
        assert_eq!(d.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(
            d.metadata.labels.as_ref().unwrap()[MANAGED_BY_LABEL],
            MANAGED_BY
        );
        let spec = d.spec.unwrap();
        assert_eq!(spec.replicas, Some(3));
        let app = BTreeMap::from([("app".to_owned(), "sample".to_owned())]);
        assert_eq!(spec.selector.match_labels.as_ref(), Some(&app));
        assert_eq!(spec.template.metadata.unwrap().labels.as_ref(), Some(&app));
        let pod = spec.template.spec.unwrap();
        assert_eq!(pod.containers.len(), 1);
        assert_eq!(pod.containers[0].name, "shell");
        assert_eq!(pod.containers[0].image.as_deref(), Some(DEFAULT_IMAGE));
        let command = pod.containers[0].command.clone().unwrap();
        assert_eq!(command[..2], ["sh", "-c"]);
        assert!(command[2].ends_with("sleep 3600"));
    }

    #[test]
    fn rejects_what_cannot_be_a_deployment() {
        let err = |s: MyOwnShell| desired_deployment(&s).unwrap_err().0;
        assert!(err(shell("x", 11, "busybox")).contains("between 0 and 10"));
        assert!(err(shell("x", -1, "busybox")).contains("spec.size is -1"));
        assert!(err(shell("x", 1, "")).contains("not an image reference"));
        assert!(err(shell("x", 1, "busy box")).contains("not an image reference"));
        assert!(err(shell(&"a".repeat(64), 1, "busybox")).contains("longer than 63"));
        let mut nameless = shell("x", 1, "busybox");
        nameless.metadata.name = None;
        assert!(err(nameless).contains("no metadata.name"));
        assert!(desired_deployment(&shell("x", 0, "busybox")).is_ok());
    }

    #[test]
    fn an_applied_deployment_with_server_defaults_is_in_sync() {
        let desired = desired_deployment(&shell("sample", 2, DEFAULT_IMAGE)).unwrap();
        assert_eq!(
            differences(&desired, &observed(&desired), Some("uid-1")),
            Vec::<String>::new()
        );
    }

    #[test]
    fn names_each_difference() {
        let desired = desired_deployment(&shell("sample", 3, "busybox:1.37")).unwrap();
        let old = observed(&desired_deployment(&shell("sample", 2, DEFAULT_IMAGE)).unwrap());
        assert_eq!(
            differences(&desired, &old, Some("uid-1")),
            [
                "spec.replicas is 2, want 3",
                "container shell runs image busybox:1.36, want busybox:1.37"
            ]
        );

        let mut tampered = observed(&desired);
        tampered.metadata.owner_references = None;
        tampered
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .remove(MANAGED_BY_LABEL);
        let spec = tampered.spec.as_mut().unwrap();
        spec.replicas = None;
        spec.template.spec.as_mut().unwrap().containers[0].command = None;
        assert_eq!(
            differences(&desired, &tampered, Some("uid-1")),
            [
                "it is not controlled by this MyOwnShell",
                "metadata.labels lack app.kubernetes.io/managed-by=myownshell",
                "spec.replicas is 1, want 3",
                "container shell runs another command",
            ]
        );
        // Without an owner uid to check (e.g. a resource not yet created), ownership is not compared.
        assert_eq!(differences(&desired, &tampered, None).len(), 3);

        // A port added to the shell container by hand.
        let mut with_port = observed(&desired);
        with_port
            .spec
            .as_mut()
            .unwrap()
            .template
            .spec
            .as_mut()
            .unwrap()
            .containers[0]
            .ports = Some(vec![k8s_openapi::api::core::v1::ContainerPort {
            container_port: 9999,
            ..Default::default()
        }]);
        assert_eq!(
            differences(&desired, &with_port, Some("uid-1")),
            ["container shell has ports [9999], want []"]
        );
    }

    #[test]
    fn finds_by_name_and_namespace() {
        let desired = desired_deployment(&shell("sample", 1, "busybox")).unwrap();
        let mut elsewhere = desired.clone();
        elsewhere.metadata.namespace = Some("other".into());
        let mut other_name = desired.clone();
        other_name.metadata.name = Some("sample-2".into());
        assert!(find_deployment(&desired, &[elsewhere.clone(), other_name.clone()]).is_none());
        let all = [elsewhere, other_name, desired.clone()];
        assert_eq!(find_deployment(&desired, &all), Some(&desired));
    }
}
