//! One DRM client as `/proc/PID/fdinfo/FD` describes it (the kernel's drm-usage-stats
//! format): `key: value` lines, split at the first colon and trimmed, numbers with an
//! optional unit. What is read is bounded: a file is read up to [`MAX_BYTES`], and at most
//! [`MAX_KEYS`] engines and [`MAX_KEYS`] memory regions are kept; a line without a colon,
//! a number past `u64` or a unit gputop does not know is skipped, never guessed.

use std::collections::BTreeMap;

/// The most of one fdinfo file read (a real one is under 2 KiB).
pub const MAX_BYTES: usize = 16 * 1024;

/// The most engine classes, and memory regions, kept of one client.
pub const MAX_KEYS: usize = 32;

/// What one fdinfo says of its DRM client.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fdinfo {
    /// `drm-driver`: `amdgpu`, `i915`, `xe`; `None` when the file is not a DRM client's.
    pub driver: Option<String>,
    /// `drm-pdev` (or amdgpu 5.14's `pdev`): the device's PCI slot, `0000:03:00.0`.
    pub pdev: Option<String>,
    /// `drm-client-id`: with the slot, the client's identity (several fds, and several
    /// processes, can share one client).
    pub client_id: Option<u64>,
    /// `drm-engine-<class>`: nanoseconds the class was busy with this client's work.
    pub engine_ns: BTreeMap<String, u64>,
    /// `drm-cycles-<class>`: busy GPU cycles (xe).
    pub cycles: BTreeMap<String, u64>,
    /// `drm-total-cycles-<class>`: the GPU timestamp the cycles are counted against (xe).
    pub total_cycles: BTreeMap<String, u64>,
    /// `drm-engine-capacity-<class>`: identical engines behind the class (absent: 1).
    pub capacity: BTreeMap<String, u64>,
    /// Bytes resident per memory region: `drm-resident-<r>`, else its deprecated alias
    /// `drm-memory-<r>` (amdgpu prints both: never added), else `drm-total-<r>`.
    pub resident: BTreeMap<String, u64>,
}

/// Which key a region's figure came from, best first: a better one replaces a worse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Source {
    Total,
    Memory,
    Resident,
}

impl Fdinfo {
    /// The client `text` describes (the file's first [`MAX_BYTES`]; not UTF-8 is read
    /// lossily, so a hostile file yields skipped lines, never an error).
    pub fn parse(text: &[u8]) -> Self {
        let text = String::from_utf8_lossy(&text[..text.len().min(MAX_BYTES)]);
        let mut info = Self::default();
        let mut region_source: BTreeMap<String, Source> = BTreeMap::new();
        for line in text.lines() {
            let Some((key, value)) = line.split_once(':') else {
                continue;
            };
            let (key, value) = (key.trim(), value.trim());
            match key {
                "drm-driver" => info.driver = Some(bounded_text(value)),
                "drm-pdev" | "pdev" => info.pdev = Some(bounded_text(value)),
                "drm-client-id" => info.client_id = value.parse().ok(),
                _ => info.read_counter(key, value, &mut region_source),
            }
        }
        info
    }

    fn read_counter(&mut self, key: &str, value: &str, region_source: &mut BTreeMap<String, Source>) {
        let Some(rest) = key.strip_prefix("drm-") else {
            return;
        };
        let keyed = |map: &mut BTreeMap<String, u64>, class: &str, number: Option<u64>| {
            if let Some(number) = number
                && !class.is_empty()
                && (map.len() < MAX_KEYS || map.contains_key(class))
            {
                map.insert(class.to_string(), number);
            }
        };
        if let Some(class) = rest.strip_prefix("engine-capacity-") {
            keyed(&mut self.capacity, class, plain(value).filter(|c| *c > 0));
        } else if let Some(class) = rest.strip_prefix("engine-") {
            keyed(&mut self.engine_ns, class, nanoseconds(value));
        } else if let Some(class) = rest.strip_prefix("total-cycles-") {
            keyed(&mut self.total_cycles, class, plain(value));
        } else if let Some(class) = rest.strip_prefix("cycles-") {
            keyed(&mut self.cycles, class, plain(value));
        } else {
            let (source, region) = if let Some(region) = rest.strip_prefix("resident-") {
                (Source::Resident, region)
            } else if let Some(region) = rest.strip_prefix("memory-") {
                (Source::Memory, region)
            } else if let Some(region) = rest.strip_prefix("total-") {
                (Source::Total, region)
            } else {
                return;
            };
            let Some(bytes) = size(value) else {
                return;
            };
            if region_source.get(region).is_some_and(|known| *known > source) {
                return;
            }
            if !region.is_empty() && (self.resident.len() < MAX_KEYS || self.resident.contains_key(region)) {
                region_source.insert(region.to_string(), source);
                self.resident.insert(region.to_string(), bytes);
            }
        }
    }
}

/// A name from the file, cut at 64 bytes (a slot or a driver name is far shorter).
fn bounded_text(value: &str) -> String {
    let mut end = value.len().min(64);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    value[..end].to_string()
}

/// A whole number with no unit.
fn plain(value: &str) -> Option<u64> {
    value.parse().ok()
}

/// Nanoseconds: a number, optionally followed by ` ns`.
fn nanoseconds(value: &str) -> Option<u64> {
    let number = value.strip_suffix("ns").unwrap_or(value).trim_end();
    number.parse().ok()
}

/// Bytes from a size as the kernel writes it: bare bytes, or `KiB`, `MiB`, `GiB`, and
/// amdgpu 5.14-5.18's `kB` (which meant KiB). `None` past `u64` or for another unit. Not
/// [`crate::format::parse_size`], which reads sizes as people write them: there `kB` is
/// 1000 bytes, and decimals go through `f64`, which would round exact counters past 2^53.
pub fn size(value: &str) -> Option<u64> {
    let (number, unit) = match value.split_once(char::is_whitespace) {
        Some((number, unit)) => (number, unit.trim()),
        None => (value, ""),
    };
    let shift = match unit {
        "" => 0,
        "kB" | "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        _ => return None,
    };
    let number: u64 = number.parse().ok()?;
    number.checked_mul(1 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROCFS: &str = "pos:\t0\nflags:\t02100002\nmnt_id:\t26\nino:\t1043\n";

    #[test]
    fn an_amdgpu_client_of_the_current_style_with_both_memory_keys_counted_once() {
        let text = format!(
            "{PROCFS}drm-driver:\tamdgpu\ndrm-client-id:\t101\ndrm-pdev:\t0000:03:00.0\npasid:\t32769\n\
             drm-total-vram:\t262144 KiB\ndrm-resident-vram:\t262144 KiB\ndrm-shared-vram:\t0\n\
             drm-memory-vram:\t262144 KiB\ndrm-memory-gtt: \t2048 KiB\ndrm-engine-gfx:\t50000000000 ns\n"
        );
        let info = Fdinfo::parse(text.as_bytes());
        assert_eq!(info.driver.as_deref(), Some("amdgpu"));
        assert_eq!(info.pdev.as_deref(), Some("0000:03:00.0"));
        assert_eq!(info.client_id, Some(101));
        assert_eq!(
            info.resident["vram"],
            262_144 << 10,
            "resident, never added to memory"
        );
        assert_eq!(info.resident["gtt"], 2 << 20, "the tab after `: ` is whitespace");
        assert_eq!(info.engine_ns["gfx"], 50_000_000_000);
        assert!(info.capacity.is_empty());
    }

    #[test]
    fn an_xe_client_counts_cycles_with_capacities() {
        let text = format!(
            "{PROCFS}drm-driver:\txe\ndrm-client-id:\t401\ndrm-pdev:\t0000:08:00.0\ndrm-total-system:\t0\n\
             drm-total-gtt:\t8 MiB\ndrm-resident-gtt:\t8 MiB\ndrm-total-vram0:\t512 MiB\n\
             drm-resident-vram0:\t512 MiB\ndrm-cycles-rcs:\t0\ndrm-total-cycles-rcs:\t7655183225\n\
             drm-cycles-vcs:\t28257900\ndrm-total-cycles-vcs:\t7655183225\ndrm-engine-capacity-vcs:\t2\n"
        );
        let info = Fdinfo::parse(text.as_bytes());
        assert_eq!(info.driver.as_deref(), Some("xe"));
        assert_eq!(info.cycles["vcs"], 28_257_900);
        assert_eq!(info.total_cycles["vcs"], 7_655_183_225);
        assert_eq!(info.capacity["vcs"], 2);
        assert_eq!(info.resident["vram0"], 512 << 20);
        assert_eq!(
            info.resident["system"], 0,
            "the total where nothing better is given"
        );
        assert!(info.engine_ns.is_empty(), "xe has no nanosecond keys");
    }

    #[test]
    fn every_unit_the_kernel_writes_is_read_and_others_are_skipped() {
        for (value, bytes) in [
            ("0", Some(0)),
            ("1234567", Some(1_234_567)),
            ("131072 KiB", Some(131_072 << 10)),
            ("17196 kB", Some(17_196 << 10)),
            ("512 MiB", Some(512 << 20)),
            ("2 GiB", Some(2 << 30)),
            ("3 TiB", None),
            ("18446744073709551615", Some(u64::MAX)),
            ("18446744073709551616", None),
            ("18446744073709551615 KiB", None),
            ("-1", None),
            ("12 parsecs", None),
        ] {
            assert_eq!(size(value), bytes, "{value}");
        }
    }

    #[test]
    fn older_and_odd_files_give_what_they_hold_and_nothing_else() {
        // amdgpu 5.14-5.18: no drm- keys, so no driver, no client and no counters.
        let old = Fdinfo::parse(b"pdev:\t0000:03:00.0\npasid:\t32769\nvram mem:\t17196 kB\ngfx0:\t70.59%\n");
        assert_eq!(old.pdev.as_deref(), Some("0000:03:00.0"));
        assert_eq!((old.driver, old.client_id), (None, None));
        assert!(old.resident.is_empty() && old.engine_ns.is_empty());
        // The i915 man-pages example.
        let i915 = Fdinfo::parse(
            b"drm-driver:\ti915\ndrm-total-system0:\t6044 KiB\ndrm-engine-render:\t346249 ns\n\
              drm-engine-capacity-video:\t2\ndrm-resident-system0:\t1234567\n",
        );
        assert_eq!(i915.engine_ns["render"], 346_249);
        assert_eq!(i915.capacity["video"], 2);
        assert_eq!(i915.resident["system0"], 1_234_567, "resident beats total");
        // Garbage: binary, no colon, numbers past u64, a zero capacity.
        let garbage = Fdinfo::parse(
            b"\xff\xfe\x00drm-engine-gfx\ndrm-engine-gfx: 99999999999999999999999 ns\n\
              drm-engine-capacity-gfx:\t0\n:\n",
        );
        assert_eq!(garbage, Fdinfo::default());
    }

    #[test]
    fn a_huge_file_is_read_to_its_bound_and_keeps_a_bounded_number_of_keys() {
        let mut text = String::from("drm-driver:\tamdgpu\n");
        for i in 0..10_000 {
            text.push_str(&format!("drm-engine-e{i}:\t{i} ns\ndrm-resident-r{i}:\t{i}\n"));
        }
        let info = Fdinfo::parse(text.as_bytes());
        assert_eq!(info.engine_ns.len(), MAX_KEYS);
        assert_eq!(info.resident.len(), MAX_KEYS);
        let long = format!("drm-driver:\t{}\n", "x".repeat(1 << 20));
        assert_eq!(Fdinfo::parse(long.as_bytes()).driver.map(|d| d.len()), Some(64));
    }
}
