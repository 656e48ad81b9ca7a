//! Text a worker controls (error messages, phase names, output kinds and names, log lines),
//! cut to a bounded size before it reaches an error message, a Condition, an Event or a log.

use std::borrow::Cow;

/// The most of one worker-supplied string that reaches a message (error, Condition, Event).
pub const MESSAGE_BYTES: usize = 1024;

/// The most of a short worker-supplied name (phase, kind, object name) that reaches a message.
pub const NAME_BYTES: usize = 256;

/// The most of one guest log line (message and fields) that reaches the host's log.
pub const LOG_LINE_BYTES: usize = 8 << 10;

/// The most of a Condition's message the host writes (the API server accepts 32 KiB).
pub const CONDITION_MESSAGE_BYTES: usize = 4 << 10;

/// `text` if it fits in `max` bytes, else its first `max` bytes (cut on a character boundary)
/// followed by a note saying how much was cut.
pub fn bounded(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    Cow::Owned(format!(
        "{}… ({} more bytes truncated)",
        &text[..cut],
        text.len() - cut
    ))
}

/// [`bounded`] for an owned string, without copying one that fits.
pub fn bound_owned(text: String, max: usize) -> String {
    if text.len() <= max {
        text
    } else {
        bounded(&text, max).into_owned()
    }
}

/// `text` if it fits in `max` bytes, else its last `max` bytes (cut on a character boundary)
/// after a note saying how much was cut: the end of what a guest or a child wrote to stderr is
/// where its error is.
pub fn tail(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    Cow::Owned(format!(
        "({start} earlier bytes truncated) …{}",
        &text[start..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_keeps_the_end_and_says_how_much_went() {
        assert_eq!(tail("panicked", 16), "panicked");
        let long = format!("{}the error", "é".repeat(600));
        let cut = tail(&long, 20);
        // 1,209 bytes; the last 20 would start inside an "é", so the cut moves past it.
        assert_eq!(cut, "(1190 earlier bytes truncated) …éééééthe error");
    }

    #[test]
    fn short_text_is_kept_and_long_text_says_it_was_cut() {
        assert_eq!(bounded("Syncing", 16), "Syncing");
        let long = "P".repeat(16 << 20);
        let cut = bounded(&long, MESSAGE_BYTES);
        assert!(cut.len() < MESSAGE_BYTES + 64, "{}", cut.len());
        assert!(
            cut.ends_with(&format!("… ({} more bytes truncated)", (16 << 20) - 1024)),
            "{}",
            &cut[1000..]
        );
    }

    #[test]
    fn cuts_on_a_character_boundary() {
        let s = "é".repeat(600);
        let cut = bound_owned(s, 1001);
        assert!(cut.starts_with(&"é".repeat(500)));
        assert!(cut.contains("… (200 more bytes truncated)"), "{cut}");
    }
}
