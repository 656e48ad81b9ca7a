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

/// Frames kept at each end of a run of stack frames that is cut.
const STACK_ENDS: usize = 5;

/// A worker's error text (what it wrote to stderr as it failed) as a message of at most `max`
/// bytes. A run of stack frames longer than twice [`STACK_ENDS`] keeps that many frames at
/// each end and says how many went between (a runaway recursion prints thousands). When the
/// text is still too long, the error's headline (what comes before its first frame: a
/// JavaScript worker's class and message) is kept, up to a quarter of `max`, with the
/// [`tail`] of the rest (where a Python traceback names its error).
pub fn error_text(text: &str, max: usize) -> Cow<'_, str> {
    let condensed = without_long_stacks(text);
    if condensed.len() <= max {
        return condensed;
    }
    let lines: Vec<&str> = condensed.lines().collect();
    let first_frame = lines
        .iter()
        .position(|l| frame_line(l).is_some() || l.trim() == "Stack:");
    let Some(first_frame) = first_frame.filter(|&i| i > 0) else {
        return Cow::Owned(tail(&condensed, max).into_owned());
    };
    let headline = bounded(lines[..first_frame].join("\n").trim_end(), max / 4).into_owned();
    let rest = lines[first_frame..].join("\n");
    let room = max.saturating_sub(headline.len() + 1);
    Cow::Owned(format!("{headline}\n{}", tail(&rest, room)))
}

/// What a stack frame line is: a JavaScript engine's `name@file:line:column`, or a Python
/// traceback's `File "…", line N, in name` (its source lines follow it, indented further).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Frame {
    JavaScript,
    Python,
}

fn frame_line(line: &str) -> Option<Frame> {
    let trimmed = line.trim();
    if trimmed.starts_with("File \"") && trimmed.contains("\", line ") {
        return Some(Frame::Python);
    }
    let mut parts = trimmed.rsplitn(3, ':');
    let (column, line_number, place) = (parts.next()?, parts.next()?, parts.next()?);
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(column) && digits(line_number) && place.contains('@') && !place.contains(' '))
        .then_some(Frame::JavaScript)
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// `text` with each run of more than `2 × STACK_ENDS` frames cut to its ends.
fn without_long_stacks(text: &str) -> Cow<'_, str> {
    let lines: Vec<&str> = text.lines().collect();
    // Each frame: the index of its first line and one past its last.
    let mut frames: Vec<(usize, usize)> = Vec::new();
    let mut runs: Vec<Vec<(usize, usize)>> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(kind) = frame_line(lines[i]) else {
            if !frames.is_empty() {
                runs.push(std::mem::take(&mut frames));
            }
            i += 1;
            continue;
        };
        let start = i;
        i += 1;
        if kind == Frame::Python {
            while i < lines.len()
                && frame_line(lines[i]).is_none()
                && !lines[i].trim().is_empty()
                && indent(lines[i]) > indent(lines[start])
            {
                i += 1;
            }
        }
        frames.push((start, i));
    }
    if !frames.is_empty() {
        runs.push(frames);
    }
    let long: Vec<&Vec<(usize, usize)>> =
        runs.iter().filter(|r| r.len() > 2 * STACK_ENDS).collect();
    if long.is_empty() {
        return Cow::Borrowed(text);
    }
    let mut out = Vec::with_capacity(lines.len());
    let mut next = 0;
    for run in long {
        let cut_from = run[STACK_ENDS].0;
        let cut_to = run[run.len() - STACK_ENDS].0;
        out.extend(lines[next..cut_from].iter().map(|l| l.to_string()));
        let pad = " ".repeat(indent(lines[cut_from]));
        out.push(format!(
            "{pad}… ({} frames dropped) …",
            run.len() - 2 * STACK_ENDS
        ));
        next = cut_to;
    }
    out.extend(lines[next..].iter().map(|l| l.to_string()));
    Cow::Owned(out.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runaway_recursion_keeps_its_error_and_the_ends_of_its_stack() {
        // What a JavaScript worker that recurses without end leaves on stderr.
        let frames: String = (0..3000)
            .map(|i| {
                format!(
                    "  dive@/componentize-sources/bundle.js:{}:27\n",
                    700 + i % 3
                )
            })
            .collect();
        let js = format!("the worker threw InternalError:\ntoo much recursion\nStack:\n{frames}  sync@/componentize-sources/bundle.js:12:5\n");
        let text = error_text(&js, MESSAGE_BYTES);
        assert!(text.len() <= MESSAGE_BYTES + 64, "{}", text.len());
        assert!(
            text.starts_with(
                "the worker threw InternalError:\ntoo much recursion\nStack:\n  dive@"
            ),
            "{text}"
        );
        assert!(text.contains("  … (2991 frames dropped) …\n"), "{text}");
        assert!(
            text.ends_with("  sync@/componentize-sources/bundle.js:12:5"),
            "{text}"
        );
        assert_eq!(text.matches("dive@").count(), 9, "{text}");

        // A message too long to keep whole still starts with the error's class and message.
        let long = format!(
            "the worker threw RangeError:\n{}\nStack:\n{frames}",
            "m".repeat(5000)
        );
        let text = error_text(&long, MESSAGE_BYTES);
        assert!(
            text.starts_with("the worker threw RangeError:\nmmm"),
            "{text}"
        );
        assert!(text.len() <= MESSAGE_BYTES + 128, "{}", text.len());

        // Python's traceback: frames with their source lines, the error last.
        let frames: String = (0..50)
            .map(|i| {
                format!("  File \"/app/worker.py\", line {i}, in dive\n    return dive(n + 1)\n")
            })
            .collect();
        let py = format!("Traceback (most recent call last):\n{frames}RecursionError: maximum recursion depth exceeded\n");
        let text = error_text(&py, MESSAGE_BYTES);
        assert!(text.contains("  … (40 frames dropped) …\n"), "{text}");
        assert_eq!(text.matches("return dive").count(), 10, "{text}");
        assert!(
            text.ends_with("RecursionError: maximum recursion depth exceeded"),
            "{text}"
        );
        // Short stacks and other text are kept as they are.
        assert_eq!(
            error_text("panicked at src/lib.rs:3:5:\nboom", 1024),
            "panicked at src/lib.rs:3:5:\nboom"
        );
    }

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
