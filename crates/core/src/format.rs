//! Text for people: untrusted strings made safe to print, sizes, durations, times and
//! plain-text tables. Depends on nothing else in gputop.

use std::time::{SystemTime, UNIX_EPOCH};

/// Escapes control characters (terminal escape sequences among them) and bidirectional
/// overrides so they show as text and can neither drive the terminal nor reorder the line.
pub fn sanitize(text: &str) -> String {
    // Printable ASCII needs no escape: most names and command lines are, and are copied whole
    // instead of a character at a time (a report writes several per process).
    if text.bytes().all(|b| (b' '..=b'~').contains(&b)) {
        return text.to_owned();
    }
    escape_each(text)
}

/// Whether `c` must never reach a terminal or a file raw: a control character (escape
/// sequences start with one) or a bidirectional mark or override (they reorder the line).
pub fn is_hidden_control(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}')
}

/// `sanitize`, a character at a time.
fn escape_each(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if is_hidden_control(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// `1.5GiB`, `512MiB`, `0B`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes}B");
    }
    // In whole numbers: the value is bytes / scale, written with one decimal below 100 and
    // none from 100, rounded half to even as float formatting rounds (which, for one value
    // per process row, cost more than the rest of the row).
    let bytes = u128::from(bytes);
    let mut scale: u128 = 1024;
    let mut unit = 0;
    while bytes >= scale * 1024 && unit < UNITS.len() - 1 {
        scale *= 1024;
        unit += 1;
    }
    let tenths = bytes < 100 * scale;
    let scaled = if tenths { bytes * 10 } else { bytes };
    let (whole, rest) = (scaled / scale, scaled % scale);
    let rounded = match (2 * rest).cmp(&scale) {
        std::cmp::Ordering::Greater => whole + 1,
        std::cmp::Ordering::Equal => whole + whole % 2,
        std::cmp::Ordering::Less => whole,
    };
    if tenths {
        format!("{}.{}{}", rounded / 10, rounded % 10, UNITS[unit])
    } else {
        format!("{rounded}{}", UNITS[unit])
    }
}

/// Energy from joules, in SI units: `850J`, `12.3kJ`, `456MJ`: whole joules below a
/// kilojoule, then one decimal below 100 of a unit and none from 100 (0 for a negative or
/// unknown figure).
pub fn human_energy(joules: f64) -> String {
    const UNITS: [&str; 6] = ["J", "kJ", "MJ", "GJ", "TJ", "PJ"];
    let mut value = joules.max(0.0);
    let mut unit = 0;
    // 999.96 kJ reads as 1.0MJ, not as 1000kJ.
    while value >= 999.5 && unit < UNITS.len() - 1 {
        value /= 1000.0;
        unit += 1;
    }
    if unit == 0 || value >= 99.95 {
        format!("{value:.0}{}", UNITS[unit])
    } else {
        format!("{value:.1}{}", UNITS[unit])
    }
}

/// Bytes from a size as people write it: a number (decimals allowed), then optionally
/// spaces and a unit. One meaning everywhere (as coreutils reads sizes): `KiB`, `MiB`, `GiB`,
/// `TiB` and the bare `K`, `M`, `G`, `T` are binary (2^10 ...), `KB`, `MB`, `GB`, `TB`
/// decimal (10^3 ...), `B` or none bytes; units in any case. `None` for anything else, and
/// for a size past `u64`.
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    if !number.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let number: f64 = number.parse().ok()?;
    let (prefix, rest) = match unit.trim_start().char_indices().nth(1) {
        Some((i, _)) => unit.trim_start().split_at(i),
        None => (unit.trim_start(), ""),
    };
    let power = match prefix.to_ascii_uppercase().as_str() {
        "" => 0,
        "B" if rest.is_empty() => 0,
        "K" => 1,
        "M" => 2,
        "G" => 3,
        "T" => 4,
        _ => return None,
    };
    let base: f64 = match rest.to_ascii_uppercase().as_str() {
        "" | "IB" => 1024.0,
        "B" if power > 0 => 1000.0,
        _ => return None,
    };
    let bytes = (number * base.powi(power)).round();
    // 2^64 is the first f64 past u64::MAX.
    (bytes < 18_446_744_073_709_551_616.0).then_some(bytes as u64)
}

/// A length of time as a setting gives it, exactly: `1 h`, `5 min`, `90 s`, `1.5 s` (whole
/// hours and minutes in their unit, anything else in seconds).
pub fn seconds_text(seconds: f64) -> String {
    if seconds >= 3600.0 && seconds % 3600.0 == 0.0 {
        format!("{} h", seconds / 3600.0)
    } else if seconds >= 60.0 && seconds % 60.0 == 0.0 {
        format!("{} min", seconds / 60.0)
    } else {
        format!("{} s", trim_number(seconds))
    }
}

/// A number without a useless `.0`: `80`, `92.5` (one decimal at most).
pub fn trim_number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

/// `H:MM:SS`, or `Dd HH:MM` past a day.
pub fn human_duration(seconds: u64) -> String {
    let (d, h, m, s) = (
        seconds / 86_400,
        seconds / 3600 % 24,
        seconds / 60 % 60,
        seconds % 60,
    );
    if d > 0 {
        format!("{d}d {h:02}:{m:02}")
    } else {
        format!("{}:{m:02}:{s:02}", seconds / 3600)
    }
}

/// How long ago, roughly: `12 s`, `3 min`, `5 h`, `2 d`.
pub fn age(seconds: u64) -> String {
    match seconds {
        s if s < 120 => format!("{s} s"),
        s if s < 2 * 3600 => format!("{} min", s / 60),
        s if s < 2 * 86_400 => format!("{} h", s / 3600),
        s => format!("{} d", s / 86_400),
    }
}

/// RFC 3339 UTC time, e.g. `2026-11-29T15:40:01Z`.
pub fn rfc3339(time: SystemTime) -> String {
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

/// Lays out rows in columns; `right` says which columns are right-aligned.
pub fn table(rows: &[Vec<String>], right: &[bool]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    // The last cell of a short row (a lost GPU's message) spills over; it sets no width.
    let measured = |row: &Vec<String>, c: usize| row.len() == columns || c + 1 < row.len();
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter(|r| measured(r, c))
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let spaces = |out: &mut String, n: usize| out.extend(std::iter::repeat_n(' ', n));
    let mut out = String::with_capacity(rows.len() * (widths.iter().sum::<usize>() + 2 * columns + 1));
    for row in rows {
        let line_start = out.len();
        for (c, cell) in row.iter().enumerate() {
            if c > 0 {
                out.push_str("  ");
            }
            let pad = widths[c].saturating_sub(cell.chars().count());
            let last = c + 1 == row.len();
            if right.get(c).copied().unwrap_or(false) {
                spaces(&mut out, pad);
                out.push_str(cell);
            } else {
                out.push_str(cell);
                if !last {
                    spaces(&mut out, pad);
                }
            }
        }
        let line_end = line_start + out[line_start..].trim_end().len();
        out.truncate(line_end);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn sizes_read_binary_for_bare_and_ib_units_and_decimal_for_b_units() {
        for (text, bytes) in [
            ("100", Some(100)),
            ("100B", Some(100)),
            ("4G", Some(4 << 30)),
            ("4g", Some(4 << 30)),
            ("1.5GiB", Some(3 << 29)),
            ("512 MiB", Some(512 << 20)),
            ("64M", Some(64 << 20)),
            ("64K", Some(64 << 10)),
            ("64KiB", Some(64 << 10)),
            ("64kB", Some(64_000)),
            ("64KB", Some(64_000)),
            ("40GB", Some(40_000_000_000)),
            ("2 TB", Some(2_000_000_000_000)),
            ("1T", Some(1 << 40)),
            ("0", Some(0)),
            ("", None),
            ("G", None),
            (".5G", None),
            ("-1G", None),
            ("4X", None),
            ("4GiBs", None),
            ("4 B B", None),
            ("4iB", None),
            ("1.2.3M", None),
            ("99999999999T", None),
        ] {
            assert_eq!(parse_size(text), bytes, "{text:?}");
        }
    }

    #[test]
    fn the_simulators_scenario_sizes_mean_what_gputops_mean() {
        for text in [
            "123", "512 MiB", "40GB", "1.5 GiB", "2TB", "64KiB", "64kB", "3 TiB",
        ] {
            assert_eq!(nvml_sim::scenario::parse_size(text), parse_size(text), "{text:?}");
        }
    }

    #[test]
    fn escape_sequences_are_shown_not_executed() {
        assert_eq!(sanitize("evil\x1b[2J\x07name\n"), "evil\\u{1b}[2J\\u{7}name\\n");
        // The printable-ASCII shortcut agrees with the escaping, on every ASCII character.
        for byte in 0..=127u8 {
            let text = format!("a{}b", byte as char);
            assert_eq!(sanitize(&text), escape_each(&text), "byte {byte}");
        }
        assert_eq!(sanitize("del\x7f"), "del\\u{7f}");
        assert_eq!(
            sanitize("python3 train.py --lr=3e-4 ü"),
            "python3 train.py --lr=3e-4 ü"
        );
    }

    #[test]
    fn human_units() {
        assert_eq!(human_bytes(0), "0B");
        assert_eq!(human_bytes(1536), "1.5KiB");
        assert_eq!(human_bytes(80 << 30), "80.0GiB");
        // As float formatting writes the same value (exact below 2^53 bytes), ties included.
        let float = |bytes: u64| {
            const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
            let mut value = bytes as f64 / 1024.0;
            let mut unit = 0;
            while value >= 1024.0 && unit < UNITS.len() - 1 {
                value /= 1024.0;
                unit += 1;
            }
            if value >= 100.0 {
                format!("{value:.0}{}", UNITS[unit])
            } else {
                format!("{value:.1}{}", UNITS[unit])
            }
        };
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        // Ties: 1.25 and 1.75 KiB, 100.5 and 101.5 KiB, 2.25 GiB.
        let mut values: Vec<u64> = vec![1024, 1280, 1792, 102_912, 103_936, 9 << 28, 1_048_575, 1 << 52];
        for shift in 10..53 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            values.extend((0..200).map(|k| (1u64 << shift) + (seed.rotate_left(k) >> (64 - shift))));
            values.extend((1..40).map(|k| (1u64 << shift) / 8 * k).filter(|&v| v >= 1024));
        }
        for bytes in values {
            assert_eq!(human_bytes(bytes), float(bytes), "{bytes}");
        }
        assert_eq!(human_bytes(300 << 20), "300MiB");
        assert_eq!(human_duration(3723), "1:02:03");
        assert_eq!(human_duration(90_061), "1d 01:01");
    }

    #[test]
    fn energy_reads_in_si_units() {
        for (millijoules, text) in [
            (0, "0J"),
            (850_400, "850J"),
            (999_400, "999J"),
            (999_600, "1.0kJ"),
            (12_345_000, "12.3kJ"),
            (99_990_000, "100kJ"),
            (456_000_000_000, "456MJ"),
            (999_960_000_000, "1.0GJ"),
            (u64::MAX, "18.4PJ"),
        ] {
            assert_eq!(
                human_energy(millijoules as f64 / 1000.0),
                text,
                "{millijoules} mJ"
            );
        }
    }

    #[test]
    fn ages_read_in_the_unit_that_suits_them() {
        assert_eq!(age(0), "0 s");
        assert_eq!(age(119), "119 s");
        assert_eq!(age(120), "2 min");
        assert_eq!(age(7199), "119 min");
        assert_eq!(age(7200), "2 h");
        assert_eq!(age(3 * 86_400), "3 d");
    }

    #[test]
    fn rfc3339_matches_known_instants() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_795_966_801);
        assert_eq!(rfc3339(t), "2026-11-29T15:40:01Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00Z");
    }
}
