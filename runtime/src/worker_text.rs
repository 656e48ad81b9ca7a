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

/// `text` if it fits in `max` bytes, else its end: the end of what a guest or a child wrote to
/// stderr is where its error is. When the cut falls inside a line, that line's start is kept
/// too (up to a quarter of `max`), since an error's line starts with what it is: a Python
/// `ValueError: …` or a JavaScript `the worker threw TypeError: …` whose text is too long to keep
/// whole is cut in its middle, not before its name. Each cut says how many bytes it took; every
/// cut is on a character boundary, and the kept text is at most `max` bytes.
pub fn tail(text: &str, max: usize) -> Cow<'_, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let mut head_end = line_start + (start - line_start).min(max / 4);
    while !text.is_char_boundary(head_end) {
        head_end -= 1;
    }
    let earlier = if line_start > 0 {
        format!("({line_start} earlier bytes truncated) …")
    } else {
        String::new()
    };
    if head_end == line_start {
        return Cow::Owned(format!("{earlier}{}", &text[start..]));
    }
    // The line's start takes the place of as much of the end.
    let mut rest = start + (head_end - line_start);
    while !text.is_char_boundary(rest) {
        rest += 1;
    }
    Cow::Owned(format!(
        "{earlier}{}… ({} bytes truncated) …{}",
        &text[line_start..head_end],
        rest - head_end,
        &text[rest..]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_keeps_the_end_and_says_how_much_went() {
        assert_eq!(tail("panicked", 16), "panicked");
        // Cut at a line's start: the lines before it go.
        let lines = format!("{}\nthe error", "x".repeat(100));
        assert_eq!(tail(&lines, 9), "(101 earlier bytes truncated) …the error");
        let long = format!("{}the error", "é".repeat(600));
        let cut = tail(&long, 20);
        // 1,209 bytes on one line: its first 5 bytes (two "é", the cut moved back off the
        // third) and its last 15 (the cut moved past a half "é").
        assert_eq!(cut, "éé… (1190 bytes truncated) …éééthe error");
    }

    #[test]
    fn a_long_error_line_keeps_its_name_and_its_end() {
        let traceback = format!(
            "Traceback (most recent call last):\n  File \"app.py\", line 3, in sync\nValueError: {}the end",
            "x".repeat(5000)
        );
        let cut = tail(&traceback, 1024);
        // The lines before the error's go; of its line, the first quarter of the bound (256
        // bytes) and the last 768 stay.
        let head = format!("ValueError: {}", "x".repeat(256 - 12));
        let end = format!("{}the end", "x".repeat(768 - 7));
        let line = traceback.len() - 68;
        assert_eq!(
            cut,
            format!(
                "(68 earlier bytes truncated) …{head}… ({} bytes truncated) …{end}",
                line - 1024
            )
        );
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
