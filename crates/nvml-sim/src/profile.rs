//! Driver profiles: what a driver version exports and how it lays out its answers.
//!
//! A scenario's `[system] driver_version` selects the behaviour public reports show for that
//! driver (each rule below names its source); `missing_symbols` and
//! `process_v3_entry_bytes` add to or override it. [`hide_exports`] writes a copy of the
//! library whose dynamic symbol table lacks the absent exports, so clients that probe with
//! `dlsym` (nvitop, nvml-wrapper) find them missing, as on the real driver.

use crate::scenario::System;

/// A driver version as `major.minor.patch`; missing parts read as 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct DriverVersion(pub u32, pub u32, pub u32);

impl DriverVersion {
    /// `"535.54.03"` -> (535, 54, 3); `None` for text that does not start with a number.
    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.trim().split('.').map(|part| {
            let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<u32>().ok()
        });
        let major = parts.next()??;
        let minor = parts.next().flatten().unwrap_or(0);
        let patch = parts.next().flatten().unwrap_or(0);
        Some(Self(major, minor, patch))
    }
}

/// Exports that appeared in a driver release: absent from every earlier version.
const INTRODUCED: &[(DriverVersion, &[&str])] = &[
    // The `_v2` process calls exist from 450.66 on (gpustat PR #107, #138: 450.36.06 answers
    // "Function Not Found").
    (
        DriverVersion(450, 66, 0),
        &[
            "nvmlDeviceGetComputeRunningProcesses_v2",
            "nvmlDeviceGetGraphicsRunningProcesses_v2",
            "nvmlDeviceGetMPSComputeRunningProcesses_v2",
        ],
    ),
    // `nvmlDeviceGetMemoryInfo_v2` first shipped in 510.39.01 (nvidia-settings #78; gpustat
    // #141), with the `_v3` process calls of the same headers.
    (
        DriverVersion(510, 39, 1),
        &[
            "nvmlDeviceGetMemoryInfo_v2",
            "nvmlDeviceGetComputeRunningProcesses_v3",
            "nvmlDeviceGetGraphicsRunningProcesses_v3",
            "nvmlDeviceGetMPSComputeRunningProcesses_v3",
        ],
    ),
    // Confidential computing arrived with R535; 535.43.02 to 535.86.x export it without
    // nvmlDeviceGetRunningProcessDetailList (nvitop PRs #79, #89).
    (
        DriverVersion(535, 43, 2),
        &["nvmlDeviceGetConfComputeMemSizeInfo"],
    ),
    (
        DriverVersion(535, 98, 0),
        &["nvmlDeviceGetRunningProcessDetailList"],
    ),
    // nvmlDeviceGetProcessesUtilizationInfo is R550's (nvml.h 12.4; HAMi #2015).
    (
        DriverVersion(550, 0, 0),
        &["nvmlDeviceGetProcessesUtilizationInfo"],
    ),
];

/// The drivers whose `_v3` process calls write 32-byte entries (an extra
/// `usedGpuCcProtectedMemory`) with no version bump: 535.43.02 up to 535.98 (nvitop PRs #79
/// and #89; gpustat #161, #157; go-nvml #75).
const CC_LAYOUT: (DriverVersion, DriverVersion) = (DriverVersion(535, 43, 2), DriverVersion(535, 98, 0));

/// The exports this driver lacks: those introduced after its version, and the scenario's
/// `missing_symbols`. A version that does not parse lacks only the listed ones.
pub fn absent_exports(system: &System) -> Vec<String> {
    let mut absent: Vec<String> = match DriverVersion::parse(&system.driver_version) {
        Some(version) => INTRODUCED
            .iter()
            .filter(|(since, _)| version < *since)
            .flat_map(|(_, names)| names.iter().map(|n| (*n).to_string()))
            .collect(),
        None => Vec::new(),
    };
    for name in &system.missing_symbols {
        if !absent.contains(name) {
            absent.push(name.clone());
        }
    }
    absent
}

/// Bytes per entry the `_v3` process calls write: the scenario's `process_v3_entry_bytes`,
/// else 32 on the drivers of `CC_LAYOUT`, else 24.
pub fn v3_entry_bytes(system: &System) -> usize {
    system.process_v3_entry_bytes.unwrap_or_else(|| {
        let cc =
            DriverVersion::parse(&system.driver_version).is_some_and(|v| CC_LAYOUT.0 <= v && v < CC_LAYOUT.1);
        if cc { 32 } else { 24 }
    })
}

/// Writes to `out` a copy of the simulator library `built` that lacks the exports the
/// scenario's driver lacks, as the real driver's library does.
pub fn write_driver_library(
    built: &std::path::Path,
    scenario_text: &str,
    out: &std::path::Path,
) -> Result<(), String> {
    #[derive(serde::Deserialize)]
    struct SystemOnly {
        #[serde(default)]
        system: Option<toml::Value>,
    }
    let parsed: SystemOnly = toml::from_str(scenario_text).map_err(|e| e.message().to_string())?;
    let system: System = match parsed.system {
        Some(value) => value
            .try_into()
            .map_err(|e: toml::de::Error| e.message().to_string())?,
        None => System::default(),
    };
    let mut library = std::fs::read(built).map_err(|e| format!("{}: {e}", built.display()))?;
    hide_exports(&mut library, &absent_exports(&system))?;
    std::fs::write(out, library).map_err(|e| format!("{}: {e}", out.display()))
}

/// Renames each of `names` in the ELF dynamic string table of `library` (one byte changed,
/// so `dlsym` no longer finds it). Returns how many were renamed; names not exported are
/// skipped. Errors when `library` is not a 64-bit little-endian ELF file.
pub fn hide_exports(library: &mut [u8], names: &[String]) -> Result<usize, String> {
    let (start, end) = dynamic_strings(library).ok_or("not a 64-bit little-endian ELF shared library")?;
    let table = &mut library[start..end];
    let mut renamed = 0;
    for name in names {
        let wanted = name.as_bytes();
        let mut offset = 0;
        while offset < table.len() {
            let len = table[offset..]
                .iter()
                .position(|b| *b == 0)
                .unwrap_or(table.len() - offset);
            if &table[offset..offset + len] == wanted {
                // A character no NVML name has: the lookup's string compare fails.
                table[offset] = b'~';
                renamed += 1;
            }
            offset += len + 1;
        }
    }
    Ok(renamed)
}

/// The byte range of the string table that the dynamic symbol table names.
fn dynamic_strings(elf: &[u8]) -> Option<(usize, usize)> {
    const SHT_DYNSYM: u32 = 11;
    if elf.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let u16_at = |at: usize| Some(u16::from_le_bytes(elf.get(at..at + 2)?.try_into().ok()?) as usize);
    let u32_at = |at: usize| Some(u32::from_le_bytes(elf.get(at..at + 4)?.try_into().ok()?));
    let u64_at = |at: usize| Some(u64::from_le_bytes(elf.get(at..at + 8)?.try_into().ok()?) as usize);
    let (sections, entry_size, count) = (u64_at(0x28)?, u16_at(0x3A)?, u16_at(0x3C)?);
    let header = |i: usize| sections.checked_add(i.checked_mul(entry_size)?);
    let dynsym = (0..count).find_map(|i| {
        let at = header(i)?;
        (u32_at(at + 4)? == SHT_DYNSYM).then_some(at)
    })?;
    let strings = header(u32_at(dynsym + 40)? as usize)?;
    let (offset, size) = (u64_at(strings + 24)?, u64_at(strings + 32)?);
    let end = offset.checked_add(size)?;
    (end <= elf.len()).then_some((offset, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn system(version: &str) -> System {
        System {
            driver_version: version.into(),
            ..System::default()
        }
    }

    #[test]
    fn versions_parse_with_missing_parts_and_suffixes() {
        assert_eq!(DriverVersion::parse("535.54.03"), Some(DriverVersion(535, 54, 3)));
        assert_eq!(DriverVersion::parse("550.54"), Some(DriverVersion(550, 54, 0)));
        assert_eq!(
            DriverVersion::parse("470.42.01-grid"),
            Some(DriverVersion(470, 42, 1))
        );
        assert_eq!(DriverVersion::parse("custom"), None);
    }

    #[test]
    fn each_driver_lacks_what_came_after_it() {
        let absent = |v: &str| absent_exports(&system(v));
        assert!(absent("550.54.15").is_empty());
        assert_eq!(absent("535.104.05"), ["nvmlDeviceGetProcessesUtilizationInfo"]);
        let broken = absent("535.54.03");
        assert!(broken.contains(&"nvmlDeviceGetRunningProcessDetailList".to_string()));
        assert!(!broken.contains(&"nvmlDeviceGetConfComputeMemSizeInfo".to_string()));
        let r470 = absent("470.82.01");
        assert!(r470.contains(&"nvmlDeviceGetMemoryInfo_v2".to_string()));
        assert!(!r470.contains(&"nvmlDeviceGetComputeRunningProcesses_v2".to_string()));
        assert!(absent("450.36.06").contains(&"nvmlDeviceGetComputeRunningProcesses_v2".to_string()));
    }

    #[test]
    fn only_the_535_43_to_535_86_drivers_write_32_byte_v3_entries() {
        let bytes = |v: &str| v3_entry_bytes(&system(v));
        assert_eq!(bytes("535.43.02"), 32);
        assert_eq!(bytes("535.54.03"), 32);
        assert_eq!(bytes("535.86.10"), 32);
        assert_eq!(bytes("535.98"), 24);
        assert_eq!(bytes("530.30.02"), 24);
        assert_eq!(bytes("550.54.15"), 24);
        let mut odd = system("550.54.15");
        odd.process_v3_entry_bytes = Some(16);
        assert_eq!(v3_entry_bytes(&odd), 16);
    }
}
