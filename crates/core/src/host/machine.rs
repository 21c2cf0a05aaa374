//! The machine's own CPU, memory, swap, load and uptime, from `/proc/stat`, `/proc/meminfo`,
//! `/proc/loadavg` and `/proc/uptime`: opened once and re-read in place at every refresh
//! (one read each, no path lookups), parsed for the few fields shown.

use std::fs::File;

use crate::model::{HostStats, Reading};

/// CPU time of the whole machine, in clock ticks since boot.
#[derive(Debug, Clone, Copy, PartialEq)]
struct CpuTimes {
    busy: u64,
    total: u64,
}

/// Memory and swap, in bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Memory {
    total: u64,
    available: u64,
    swap_total: u64,
    swap_free: u64,
}

/// Reads the machine's figures; keeps the files and the last CPU times between refreshes.
#[derive(Debug)]
pub(super) struct MachineReader {
    stat: Option<File>,
    meminfo: Option<File>,
    loadavg: Option<File>,
    uptime: Option<File>,
    buffer: Vec<u8>,
    previous_cpu: Option<CpuTimes>,
}

impl Default for MachineReader {
    fn default() -> Self {
        Self::new()
    }
}

impl MachineReader {
    pub(super) fn new() -> Self {
        let open = |name: &str| File::open(super::roots::proc_path(name)).ok();
        Self {
            stat: open("stat"),
            meminfo: open("meminfo"),
            loadavg: open("loadavg"),
            uptime: open("uptime"),
            buffer: Vec::with_capacity(4096),
            previous_cpu: None,
        }
    }

    /// The figures now; %CPU is over the time since the previous call.
    pub(super) fn read(&mut self) -> HostStats {
        let cpu = parsed(self.stat.as_ref(), &mut self.buffer, parse_cpu, "/proc/stat");
        let cpu_percent = match (&cpu, self.previous_cpu) {
            (Ok(now), Some(before)) if now.total > before.total => {
                let busy = now.busy.saturating_sub(before.busy) as f64;
                Reading::Value((busy * 100.0 / (now.total - before.total) as f64).min(100.0))
            }
            (Ok(_), Some(_)) => Reading::failed("no clock tick since the last reading"),
            (Ok(_), None) => Reading::failed("needs two samples"),
            (Err(reason), _) => Reading::failed(reason),
        };
        // Kept until a tick has passed, so that the next reading has a delta.
        if let Ok(now) = cpu
            && self.previous_cpu.is_none_or(|before| now.total > before.total)
        {
            self.previous_cpu = Some(now);
        }
        let memory = parsed(
            self.meminfo.as_ref(),
            &mut self.buffer,
            parse_meminfo,
            "/proc/meminfo",
        );
        let of_memory = |f: fn(&Memory) -> u64| match &memory {
            Ok(m) => Reading::Value(f(m)),
            Err(reason) => Reading::failed(reason),
        };
        let load = parsed(
            self.loadavg.as_ref(),
            &mut self.buffer,
            parse_loadavg,
            "/proc/loadavg",
        );
        let uptime = parsed(
            self.uptime.as_ref(),
            &mut self.buffer,
            parse_uptime,
            "/proc/uptime",
        );
        HostStats {
            cpu_percent,
            memory_total_bytes: of_memory(|m| m.total),
            memory_used_bytes: of_memory(|m| m.total.saturating_sub(m.available)),
            swap_total_bytes: of_memory(|m| m.swap_total),
            swap_used_bytes: of_memory(|m| m.swap_total.saturating_sub(m.swap_free)),
            load_average: load.map_or_else(|r| Reading::failed(&r), Reading::Value),
            uptime_seconds: uptime.map_or_else(|r| Reading::failed(&r), Reading::Value),
        }
    }
}

/// One file read afresh into `buffer` and parsed, or why not.
fn parsed<T>(
    file: Option<&File>,
    buffer: &mut Vec<u8>,
    parse: fn(&str) -> Option<T>,
    path: &str,
) -> Result<T, String> {
    let file = file.ok_or_else(|| format!("cannot open {path}"))?;
    super::read_at_start(file, buffer, super::PROC_FILE_BYTES)
        .map_err(|error| format!("cannot read {path}: {error}"))?;
    std::str::from_utf8(buffer)
        .ok()
        .and_then(parse)
        .ok_or_else(|| format!("cannot parse {path}"))
}

/// The first line of /proc/stat: `cpu user nice system idle iowait irq softirq steal ...`
/// (guest time is already counted in user time).
fn parse_cpu(text: &str) -> Option<CpuTimes> {
    let line = text.lines().next()?.strip_prefix("cpu ")?;
    // Old kernels have fewer fields: those missing count as zero.
    let mut ticks = [0u64; 8];
    let mut fields = 0;
    for (tick, field) in ticks.iter_mut().zip(line.split_ascii_whitespace()) {
        *tick = field.parse().ok()?;
        fields += 1;
    }
    if fields < 4 {
        return None;
    }
    let [user, nice, system, idle, iowait, irq, softirq, steal] = ticks;
    let busy = user + nice + system + irq + softirq + steal;
    Some(CpuTimes {
        busy,
        total: busy + idle + iowait,
    })
}

/// MemTotal, MemAvailable (or, before Linux 3.14, free + buffers + cached), SwapTotal and
/// SwapFree, in kB in the file.
fn parse_meminfo(text: &str) -> Option<Memory> {
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|rest| rest.split_ascii_whitespace().next()?.parse::<u64>().ok())
            .map(|kb| kb * 1024)
    };
    let available =
        field("MemAvailable").or_else(|| Some(field("MemFree")? + field("Buffers")? + field("Cached")?))?;
    Some(Memory {
        total: field("MemTotal")?,
        available,
        swap_total: field("SwapTotal").unwrap_or(0),
        swap_free: field("SwapFree").unwrap_or(0),
    })
}

fn parse_loadavg(text: &str) -> Option<[f64; 3]> {
    let mut numbers = text.split_ascii_whitespace().map(|n| n.parse::<f64>().ok());
    Some([numbers.next()??, numbers.next()??, numbers.next()??])
}

/// Whole seconds since boot (the first number of /proc/uptime).
fn parse_uptime(text: &str) -> Option<u64> {
    let seconds: f64 = text.split_ascii_whitespace().next()?.parse().ok()?;
    (seconds.is_finite() && seconds >= 0.0).then_some(seconds as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_times_count_steal_and_iowait_as_the_kernel_means_them() {
        let stat = "cpu  100 20 30 400 50 6 4 10 99 0\ncpu0 1 2 3 4 5 6 7 8 9 0\nintr 12 0\n";
        assert_eq!(
            parse_cpu(stat),
            Some(CpuTimes {
                busy: 170,
                total: 620
            })
        );
        assert_eq!(parse_cpu("cpu  1 2 3 4\n"), Some(CpuTimes { busy: 6, total: 10 }));
        assert_eq!(parse_cpu("cpu0 1 2 3 4 5 6 7 8\n"), None, "not the total line");
        assert_eq!(parse_cpu("cpu  1 x 3 4 5 6 7 8\n"), None);
        assert_eq!(parse_cpu(""), None);
    }

    #[test]
    fn memory_uses_mem_available_or_its_older_parts() {
        let modern = "MemTotal:       1000 kB\nMemFree:         100 kB\nMemAvailable:    600 kB\n\
                      Buffers:          50 kB\nCached:          200 kB\nSwapTotal:       300 kB\nSwapFree:        100 kB\n";
        assert_eq!(
            parse_meminfo(modern),
            Some(Memory {
                total: 1000 * 1024,
                available: 600 * 1024,
                swap_total: 300 * 1024,
                swap_free: 100 * 1024
            })
        );
        let old = "MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 50 kB\nCached: 200 kB\n";
        let memory = parse_meminfo(old).unwrap();
        assert_eq!(memory.available, 350 * 1024);
        assert_eq!(memory.swap_total, 0);
        assert_eq!(parse_meminfo("MemFree: 1 kB\n"), None);
    }

    #[test]
    fn load_and_uptime() {
        assert_eq!(
            parse_loadavg("0.89 0.63 0.75 1/148 23421\n"),
            Some([0.89, 0.63, 0.75])
        );
        assert_eq!(parse_loadavg("0.89 0.63\n"), None);
        assert_eq!(parse_uptime("26287.21 38157.85\n"), Some(26287));
        assert_eq!(parse_uptime("-1 0\n"), None);
    }

    #[test]
    fn this_machine_reads_whole_and_gives_cpu_from_the_second_reading() {
        let mut reader = MachineReader::new();
        let first = reader.read();
        assert!(matches!(first.cpu_percent, Reading::Failed(_)));
        let total = first.memory_total_bytes.get().expect("MemTotal");
        let used = first.memory_used_bytes.get().expect("used");
        assert!(total > 0 && used <= total, "{first:?}");
        assert!(first.uptime_seconds.get().is_some_and(|s| s > 0));
        // Some CPU time passes between the readings.
        let start = std::time::Instant::now();
        while start.elapsed() < std::time::Duration::from_millis(30) {
            std::hint::black_box(0);
        }
        let second = reader.read();
        let cpu = second.cpu_percent.get().expect("a delta");
        assert!((0.0..=100.0).contains(&cpu), "{cpu}");
    }
}
