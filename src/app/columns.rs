//! The process table's columns and the text of each cell, and the texts of a GPU's figures
//! ([`device`]), for the live view and `--once` alike: which columns a width holds (the
//! least useful dropped first), their widths, and one formatter per value, so the two never
//! show a process or a GPU differently.

use gputop_core::format::{human_bytes, human_duration, sanitize};
use gputop_core::model::order::SortKey;
use gputop_core::model::{GpuProcess, Reading, Snapshot};

/// What an unknown value shows.
pub const NA: &str = "N/A";

/// A column of the process table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    /// The GPU's index, or GPU/GPU instance/compute instance on a MIG machine.
    Gpu,
    /// The PID in gputop's namespace.
    Pid,
    /// `C`, `G` or `C+G`.
    Type,
    /// The owner.
    User,
    /// GPU memory held.
    GpuMemory,
    /// SM (or engine) use.
    Sm,
    /// Memory-bandwidth use.
    MemoryBandwidth,
    /// CPU use.
    Cpu,
    /// Host memory, in percent of the host's.
    HostMemory,
    /// Time since it started.
    Time,
    /// Its container, pod, job or slice.
    Container,
    /// Its command line: the rest of the width.
    Command,
}

impl Column {
    /// Every column, left to right.
    pub const ALL: [Column; 12] = [
        Column::Gpu,
        Column::Pid,
        Column::Type,
        Column::User,
        Column::GpuMemory,
        Column::Sm,
        Column::MemoryBandwidth,
        Column::Cpu,
        Column::HostMemory,
        Column::Time,
        Column::Container,
        Column::Command,
    ];

    /// The columns a narrow table gives up, in order (never the one sorted by).
    const DROPPED_FIRST: [Column; 4] = [
        Column::MemoryBandwidth,
        Column::Type,
        Column::HostMemory,
        Column::Time,
    ];

    /// Its header; `mig` when some process is on a MIG device.
    pub fn header(self, mig: bool) -> &'static str {
        match self {
            Column::Gpu if mig => "GPU/MIG",
            Column::Gpu => "GPU",
            Column::Pid => "PID",
            Column::Type => "TYPE",
            Column::User => "USER",
            Column::GpuMemory => "GPU-MEM",
            Column::Sm => "%SM",
            Column::MemoryBandwidth => "%GMBW",
            Column::Cpu => "%CPU",
            Column::HostMemory => "%MEM",
            Column::Time => "TIME",
            Column::Container => "CONTAINER",
            Column::Command => "COMMAND",
        }
    }

    /// Its width in the live view: a sortable column fits its header and the sort arrow;
    /// 0 for the command, which takes the rest.
    fn width(self, mig: bool) -> u16 {
        match self {
            Column::Gpu if mig => 8,
            Column::Gpu | Column::Type => 4,
            Column::Pid => 7,
            Column::User => 8,
            Column::GpuMemory | Column::Time | Column::Container => 9,
            Column::Sm => 4,
            Column::MemoryBandwidth | Column::Cpu => 6,
            Column::HostMemory => 5,
            Column::Command => 0,
        }
    }

    /// The order a click on its header sorts by.
    pub fn sort_key(self) -> Option<SortKey> {
        match self {
            Column::Gpu => Some(SortKey::Natural),
            Column::Pid => Some(SortKey::Pid),
            Column::User => Some(SortKey::User),
            Column::GpuMemory => Some(SortKey::GpuMemory),
            Column::Sm => Some(SortKey::Sm),
            Column::MemoryBandwidth => Some(SortKey::MemoryBandwidth),
            Column::Cpu => Some(SortKey::Cpu),
            Column::HostMemory => Some(SortKey::HostMemory),
            Column::Time => Some(SortKey::Time),
            Column::Container => Some(SortKey::Container),
            Column::Type | Column::Command => None,
        }
    }

    /// Whether its cells are right-aligned (numbers).
    pub fn right_aligned(self) -> bool {
        !matches!(
            self,
            Column::Type | Column::User | Column::Container | Column::Command
        )
    }

    /// The text of `p`'s cell; `host_memory_total` is the host's memory in bytes (for
    /// `%MEM`). The command is whole: a view that scrolls it skips its first characters.
    pub fn cell(self, p: &GpuProcess, host_memory_total: u64) -> String {
        let host = &p.host;
        match self {
            Column::Gpu => match p.mig() {
                Some(id) => format!("{}/{}/{}", p.gpu_index, id.gpu_instance, id.compute_instance),
                None => p.gpu_index.to_string(),
            },
            // The number gputop's namespace knows it by.
            Column::Pid => p.local_pid().unwrap_or(p.pid).to_string(),
            Column::Type => p.kind.label().to_string(),
            Column::User => na(&host.user, |u| sanitize(u)),
            Column::GpuMemory => na(&p.gpu_memory_bytes, |b| human_bytes(*b)),
            Column::Sm => na(&p.sm_percent, u32::to_string),
            Column::MemoryBandwidth => na(&p.memory_bandwidth_percent, u32::to_string),
            Column::Cpu => na(&host.cpu_percent, |c| format!("{c:.1}")),
            Column::HostMemory => na(&host.memory_bytes, |b| {
                format!("{:.1}", percent_of(*b, host_memory_total))
            }),
            Column::Time => na(&host.running_seconds, |s| human_duration(*s)),
            Column::Container => sanitize(p.container_label()),
            Column::Command => match &host.command {
                Reading::Value(command) => sanitize(command),
                Reading::NotSupported => NA.to_string(),
                Reading::Failed(reason) => format!("({})", sanitize(reason)),
            },
        }
    }
}

/// A column placed in a table of a given width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    /// Which column.
    pub column: Column,
    /// Its header.
    pub header: &'static str,
    /// Its width; 0 for the command, which takes the rest of the line.
    pub width: u16,
}

/// Shown, before COMMAND, when any process runs in a container and the terminal is wide.
const CONTAINER_MIN_WIDTH: u16 = 140;

/// The command line is what tells one job from another: narrow terminals drop columns, the
/// least useful first, until COMMAND has this many columns.
const COMMAND_MIN_WIDTH: u16 = 24;

/// The columns of `snapshot`'s process table in `width` columns, sorted by `sort`: CONTAINER
/// (as wide as its longest label, 9 to 40) on wide terminals when a process runs in one,
/// and on narrow ones the least useful columns dropped until COMMAND has room.
pub fn fitted(snapshot: &Snapshot, width: u16, sort: SortKey) -> Vec<Placed> {
    let mig = snapshot.processes.iter().any(|p| p.mig().is_some());
    let mut columns: Vec<Placed> = Column::ALL
        .iter()
        .filter(|c| **c != Column::Container)
        .map(|&column| Placed {
            column,
            header: column.header(mig),
            width: column.width(mig),
        })
        .collect();
    let fixed = |columns: &[Placed]| columns.iter().map(|c| c.width + 1).sum::<u16>();
    let labels = snapshot.processes.iter().filter(|p| p.host.container.is_some());
    if width >= CONTAINER_MIN_WIDTH && labels.clone().next().is_some() {
        let longest = labels
            .map(|p| p.container_label().chars().count())
            .max()
            .unwrap_or(0);
        // Widest where the command keeps 60 columns, else the usual width.
        let usual = Column::Container.width(mig);
        let room = width.saturating_sub(fixed(&columns) + 60 + 1);
        let fitted = u16::try_from(longest)
            .unwrap_or(u16::MAX)
            .clamp(9, 40)
            .min(room.max(usual));
        columns.insert(
            columns.len() - 1,
            Placed {
                column: Column::Container,
                header: Column::Container.header(mig),
                width: fitted,
            },
        );
    }
    for dropped in Column::DROPPED_FIRST {
        if width.saturating_sub(fixed(&columns)) >= COMMAND_MIN_WIDTH {
            break;
        }
        columns.retain(|c| c.column != dropped || c.column.sort_key() == Some(sort));
    }
    columns
}

/// Every column that has something to show in `snapshot`: CONTAINER only where a process
/// runs in one. What a report that no terminal narrows (a pipe, a file) prints.
pub fn every(snapshot: &Snapshot) -> Vec<Column> {
    let containers = snapshot.processes.iter().any(|p| p.host.container.is_some());
    Column::ALL
        .into_iter()
        .filter(|c| *c != Column::Container || containers)
        .collect()
}

/// A reading's text, or `N/A`.
pub fn na<T>(reading: &Reading<T>, show: impl FnOnce(&T) -> String) -> String {
    reading.value().map_or_else(|| NA.to_string(), show)
}

/// `used` in percent of `total` (0 when the total is unknown).
pub fn percent_of(used: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        used as f64 * 100.0 / total as f64
    }
}

/// The texts of a GPU's figures, for the live view's device panel and `--once`'s device
/// table alike.
pub mod device {
    use gputop_core::format::human_bytes;
    use gputop_core::model::{Device, Reading};

    use super::{NA, na};

    /// A percentage: `83%`.
    pub fn percent(reading: &Reading<u32>) -> String {
        na(reading, |p| format!("{p}%"))
    }

    /// The core's temperature: `64C`.
    pub fn temperature(d: &Device) -> String {
        na(&d.temperature_celsius, |t| format!("{t}C"))
    }

    /// The memory's temperature: `72C`.
    pub fn memory_temperature(d: &Device) -> String {
        na(&d.memory_temperature_celsius, |t| format!("{t}C"))
    }

    /// Power draw now of the limit set: `660/700W`.
    pub fn power(d: &Device) -> String {
        format!(
            "{}/{}",
            na(&d.power_usage_watts, |watts| format!("{watts:.0}")),
            na(&d.power_limit_watts, |watts| format!("{watts:.0}W"))
        )
    }

    /// Power draw at this instant: `702W`.
    pub fn power_instant(d: &Device) -> String {
        na(&d.power_instant_watts, |watts| format!("{watts:.0}W"))
    }

    /// Memory used of the total: `66.6GiB/80.0GiB`.
    pub fn memory(d: &Device) -> String {
        na(&d.memory(), |m| {
            format!("{}/{}", human_bytes(m.used), human_bytes(m.total))
        })
    }

    /// Memory used, in percent of the total: `83%`.
    pub fn memory_percent(d: &Device) -> String {
        d.memory_percent()
            .map_or_else(|| NA.to_string(), |p| format!("{p:.0}%"))
    }

    /// A clock: `1410MHz`.
    pub fn clock(reading: &Reading<u32>) -> String {
        na(reading, |mhz| format!("{mhz}MHz"))
    }

    /// A transfer rate: `408MiB/s`.
    pub fn rate(reading: &Reading<u64>) -> String {
        na(reading, |bytes| format!("{}/s", human_bytes(*bytes)))
    }
}
