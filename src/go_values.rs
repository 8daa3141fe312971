//! Values written the way Reloader (a Go program) reads them: booleans as `strconv.ParseBool`
//! and durations as `time.ParseDuration` accept them. Flags and annotations share these, so a
//! value means the same on the command line and on an object.

use std::time::Duration;

/// Go's `strconv.ParseBool`, which Reloader's flags accept (`--flag`, `--flag=true`, `--flag=0`).
pub fn parse_go_bool(value: &str) -> Result<bool, String> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        other => Err(format!("'{other}' is not a boolean (true/false)")),
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid duration '{0}' (expected a Go duration such as 30s, 5m or 1h30m)")]
pub struct DurationError(pub String);

/// Go's `time.ParseDuration` for non-negative durations (units ns, us, µs, ms, s, m, h).
pub fn parse_go_duration(input: &str) -> Result<Duration, DurationError> {
    let err = || DurationError(input.to_string());
    let s = input.trim();
    let s = s.strip_prefix('+').unwrap_or(s);
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() || s.starts_with('-') {
        return Err(err());
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(err)?;
        if num_len == 0 {
            return Err(err());
        }
        let number: f64 = rest[..num_len].parse().map_err(|_| err())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let nanos_per_unit = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(err()),
        };
        total += number * nanos_per_unit;
        rest = &rest[unit_len..];
    }
    Ok(Duration::from_nanos(total.round() as u64))
}

/// [`parse_go_duration`] for a clap `value_parser`.
pub fn go_duration_arg(input: &str) -> Result<Duration, String> {
    parse_go_duration(input).map_err(|e| e.to_string())
}

/// A Go duration that must be above zero, for a clap `value_parser`.
pub fn positive_go_duration_arg(input: &str) -> Result<Duration, String> {
    match go_duration_arg(input)? {
        d if d.is_zero() => Err(format!("'{input}' must be a positive duration")),
        d => Ok(d),
    }
}

/// Go's `time.Duration.String()` ("0s", "300ms", "1.5s", "1m30s", "1h0m0s"), so a parsed
/// duration reads back as a Go program would print it.
pub fn format_go_duration(d: Duration) -> String {
    const SECOND: u128 = 1_000_000_000;
    let n = d.as_nanos();
    match n {
        0 => "0s".to_string(),
        1..1_000 => format!("{n}ns"),
        1_000..1_000_000 => format!("{}µs", decimal(n, 1_000)),
        1_000_000..SECOND => format!("{}ms", decimal(n, 1_000_000)),
        _ => {
            let (hours, rest) = (n / (3600 * SECOND), n % (3600 * SECOND));
            let (minutes, rest) = (rest / (60 * SECOND), rest % (60 * SECOND));
            let seconds = format!("{}s", decimal(rest, SECOND));
            match (hours, minutes) {
                (0, 0) => seconds,
                (0, m) => format!("{m}m{seconds}"),
                (h, m) => format!("{h}h{m}m{seconds}"),
            }
        }
    }
}

/// `value / unit` with its fraction, trailing zeros dropped (`unit` a power of ten).
fn decimal(value: u128, unit: u128) -> String {
    let (whole, fraction) = (value / unit, value % unit);
    if fraction == 0 {
        return whole.to_string();
    }
    let width = unit.ilog10() as usize;
    let digits = format!("{fraction:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

/// Serializes a duration flag as Go prints it (the meta-info ConfigMap shows the flags).
pub fn serialize_go_duration<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_go_duration(*d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_booleans() {
        for yes in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(parse_go_bool(yes), Ok(true), "{yes}");
        }
        for no in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(parse_go_bool(no), Ok(false), "{no}");
        }
        for bad in ["", "yes", "tRUE", " true"] {
            assert!(parse_go_bool(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_go_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_go_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(parse_go_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_go_duration("2h45m10s"), Ok(Duration::from_secs(9910)));
        for bad in ["", "5", "m", "5x", "-5s", "5 m", "1h-5m"] {
            assert!(parse_go_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations_print_as_go_prints_them_and_read_back() {
        let cases = [
            (Duration::ZERO, "0s"),
            (Duration::from_nanos(7), "7ns"),
            (Duration::from_micros(1500), "1.5ms"),
            (Duration::from_millis(300), "300ms"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_secs(15), "15s"),
            (Duration::from_secs(90), "1m30s"),
            (Duration::from_secs(3600), "1h0m0s"),
            (Duration::from_millis(9_910_250), "2h45m10.25s"),
        ];
        for (d, text) in cases {
            assert_eq!(format_go_duration(d), text);
            assert_eq!(parse_go_duration(text), Ok(d), "{text}");
        }
    }

    #[test]
    fn positive_durations_refuse_zero() {
        assert_eq!(positive_go_duration_arg("2s"), Ok(Duration::from_secs(2)));
        assert!(positive_go_duration_arg("0s").is_err());
        assert!(positive_go_duration_arg("soon").is_err());
    }
}
