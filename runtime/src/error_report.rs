//! Error chains as text, each cause said once: many errors (ours and the libraries') already
//! include their cause in their own message, so a chain printed link by link would repeat it.

use std::error::Error;

/// The messages of `error` and its causes, outermost first, leaving out a cause whose text an
/// outer message already contains.
pub fn messages(error: &(dyn Error + 'static)) -> Vec<String> {
    let mut said: Vec<String> = Vec::new();
    let mut next = Some(error);
    while let Some(e) = next {
        let text = e.to_string();
        if !text.is_empty() && !said.iter().any(|outer| outer.contains(&text)) {
            said.push(text);
        }
        next = e.source();
    }
    said
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
