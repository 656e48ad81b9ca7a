//! Durations as the spec writes them (`30s`, `1m30s`, `1.5h`, `500ms`): the same syntax the
//! CRD schema's pattern accepts, and the host's own duration fields use.

use std::time::Duration;

/// The CRD schema pattern of duration fields.
pub const DURATION_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$";

/// Parses a sequence of `<number><unit>` terms (units `ms`, `s`, `m`, `h`; the number may have
/// a fraction) into their sum.
///
/// # Errors
/// A message naming the text when it does not match [`DURATION_PATTERN`].
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let invalid = || format!("{text:?} is not a duration like 30s, 1m30s or 500ms");
    let mut rest = text;
    let mut total = Duration::ZERO;
    if rest.is_empty() {
        return Err(invalid());
    }
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(invalid)?;
        let number = &rest[..number_len];
        let valid_number = !number.is_empty()
            && !number.starts_with('.')
            && !number.ends_with('.')
            && number.matches('.').count() <= 1;
        if !valid_number {
            return Err(invalid());
        }
        let value: f64 = number.parse().map_err(|_| invalid())?;
        rest = &rest[number_len..];
        let (unit_secs, unit_len) = if rest.starts_with("ms") {
            (0.001, 2)
        } else if rest.starts_with('s') {
            (1.0, 1)
        } else if rest.starts_with('m') {
            (60.0, 1)
        } else if rest.starts_with('h') {
            (3600.0, 1)
        } else {
            return Err(invalid());
        };
        rest = &rest[unit_len..];
        total += Duration::try_from_secs_f64(value * unit_secs).map_err(|_| invalid())?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_terms_and_sums_them() {
        let secs = |s: &str| parse_duration(s).unwrap().as_secs_f64();
        assert_eq!(secs("30s"), 30.0);
        assert_eq!(secs("2s"), 2.0);
        assert_eq!(secs("5m"), 300.0);
        assert_eq!(secs("1m30s"), 90.0);
        assert_eq!(secs("1.5h"), 5400.0);
        assert_eq!(secs("500ms"), 0.5);
        assert_eq!(secs("1h1m1s1ms"), 3661.001);
    }

    #[test]
    fn rejects_what_the_pattern_rejects() {
        for bad in [
            "", "30", "s", "1.s", ".5s", "1..5s", "1d", "1 m", "-1s", "1m 30s", "1sm",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
        assert!(parse_duration("1d").unwrap_err().contains("\"1d\""));
    }
}
