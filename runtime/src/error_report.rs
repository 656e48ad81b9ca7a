//! Error chains as text, each cause said once: many errors (ours and the libraries') already
//! include their cause in their own message, so a chain printed link by link would repeat it.

use std::error::Error;

/// The messages of `error` and its causes, outermost first, leaving out a cause whose text an
/// outer message already contains.
pub fn messages(error: &(dyn Error + 'static)) -> Vec<String> {
    let mut said: Vec<String> = Vec::new();
    let mut next = Some(error);
    while let Some(e) = next {
        // The API server's answer is said once, briefly; its `Status` below says it again.
        let (text, cause) = match e.downcast_ref::<kube::Error>() {
            Some(kube::Error::Api(_)) => (api_text(e), None),
            _ => (briefly_quoting_its_cause(e), e.source()),
        };
        if !text.is_empty() && !said.iter().any(|outer| outer.contains(&text)) {
            said.push(text);
        }
        next = cause;
    }
    said
}

/// A Kubernetes client error as a person reads it: the API server's message, its reason and
/// code (`services "web" is forbidden: exceeded quota: … (Forbidden, HTTP 403)`), where kube's
/// own text adds the whole answer as Rust debug output (`ApiError: … (Status { status: …`).
/// Any other error reads as its own text.
pub fn api_text(error: &(dyn Error + 'static)) -> String {
    match error.downcast_ref::<kube::Error>() {
        Some(kube::Error::Api(status)) if status.reason.is_empty() => {
            format!("{} (HTTP {})", status.message, status.code)
        }
        Some(kube::Error::Api(status)) => {
            format!(
                "{} ({}, HTTP {})",
                status.message, status.reason, status.code
            )
        }
        _ => error.to_string(),
    }
}

/// `error`'s text, where it quotes an API server's answer (its cause) in kube's words, with
/// [`api_text`]'s instead (e.g. kube-runtime's `failed to start watching object: ApiError: …`).
fn briefly_quoting_its_cause(error: &(dyn Error + 'static)) -> String {
    let text = error.to_string();
    match error.source() {
        Some(cause) if matches!(cause.downcast_ref(), Some(kube::Error::Api(_))) => {
            text.replace(&cause.to_string(), &api_text(cause))
        }
        _ => text,
    }
}

/// An error shown as [`one_line`] (a log field: `error = %Brief(&e)`).
pub struct Brief<'a>(pub &'a (dyn Error + 'static));

impl std::fmt::Display for Brief<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&one_line(self.0))
    }
}

/// `outer: cause: cause …` on one line (Conditions, reports, log fields).
pub fn one_line(error: &(dyn Error + 'static)) -> String {
    messages(error).join(": ")
}

/// What the CLI prints for a failed command: the error, then each cause not yet said.
pub fn for_terminal(error: &(dyn Error + 'static)) -> String {
    let mut lines = messages(error).into_iter();
    let mut out = format!("error: {}", lines.next().unwrap_or_default());
    for cause in lines {
        out.push_str("\n  caused by: ");
        out.push_str(&cause);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("applying ConfigMap x: {source}")]
    struct Outer {
        source: Inner,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("the API server refused it: quota exceeded")]
    struct Inner;

    /// An API server's refusal reads as its message, reason and code, once: not kube's text
    /// with the answer's debug output, nor the answer again as a cause.
    #[test]
    fn an_api_servers_answer_is_said_once_without_debug_output() {
        #[derive(Debug, thiserror::Error)]
        #[error("could not apply Service q/web: {}", api_text(.source))]
        struct Applying {
            source: kube::Error,
        }
        let refused = || {
            kube::Error::Api(Box::new(kube::core::Status {
                message: "services \"web\" is forbidden: exceeded quota: few".into(),
                reason: "Forbidden".into(),
                code: 403,
                ..Default::default()
            }))
        };
        assert!(
            refused().to_string().contains("Status {"),
            "premise: kube's text carries debug output"
        );
        let e = Applying { source: refused() };
        let expected = "could not apply Service q/web: services \"web\" is forbidden: exceeded quota: few (Forbidden, HTTP 403)";
        assert_eq!(e.to_string(), expected);
        assert_eq!(one_line(&e), expected);
        assert_eq!(
            one_line(&refused()),
            "services \"web\" is forbidden: exceeded quota: few (Forbidden, HTTP 403)"
        );
        // A library's error quoting kube's text: the quote is made brief too.
        let watch = kube::runtime::watcher::Error::WatchStartFailed(refused());
        assert_eq!(
            Brief(&watch).to_string(),
            "failed to start watching object: services \"web\" is forbidden: exceeded quota: few (Forbidden, HTTP 403)"
        );
    }

    #[test]
    fn a_cause_an_outer_message_already_says_is_left_out() {
        let e = Outer { source: Inner };
        assert_eq!(
            format!("{:#}", anyhow::Error::from(Outer { source: Inner })),
            "applying ConfigMap x: the API server refused it: quota exceeded: the API server refused it: quota exceeded",
            "premise: the naive chain repeats the cause"
        );
        assert_eq!(
            one_line(&e),
            "applying ConfigMap x: the API server refused it: quota exceeded"
        );
        let wrapped = anyhow::Error::from(Inner).context("deploying autoroute");
        assert_eq!(
            one_line(wrapped.as_ref()),
            "deploying autoroute: the API server refused it: quota exceeded"
        );
        assert_eq!(
            for_terminal(wrapped.as_ref()),
            "error: deploying autoroute\n  caused by: the API server refused it: quota exceeded"
        );
    }
}
