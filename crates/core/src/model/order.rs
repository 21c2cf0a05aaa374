//! Process orderings: the sort keys of the process table and their default directions.

use std::cmp::Ordering;

use crate::model::GpuProcess;

/// A column the process table can be sorted by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    /// GPU index, then PID.
    Natural,
    /// PID, ascending.
    Pid,
    /// User name, ascending.
    User,
    /// The container, pod, job or slice; processes on the host last.
    Container,
    /// GPU memory held.
    GpuMemory,
    /// SM utilization.
    Sm,
    /// Memory-bandwidth utilization.
    MemoryBandwidth,
    /// CPU utilization.
    Cpu,
    /// Host memory (resident set).
    HostMemory,
    /// Time since the process started.
    Time,
}

impl SortKey {
    /// In `,` / `.` order.
    pub const ALL: [SortKey; 10] = [
        SortKey::Natural,
        SortKey::Pid,
        SortKey::User,
        SortKey::Container,
        SortKey::GpuMemory,
        SortKey::Sm,
        SortKey::MemoryBandwidth,
        SortKey::Cpu,
        SortKey::HostMemory,
        SortKey::Time,
    ];

    /// The letter after `o` / `O` (nvitop's).
    pub fn letter(self) -> char {
        match self {
            Self::Natural => 'n',
            Self::Pid => 'p',
            Self::User => 'u',
            Self::Container => 'k',
            Self::GpuMemory => 'g',
            Self::Sm => 's',
            Self::MemoryBandwidth => 'b',
            Self::Cpu => 'c',
            Self::HostMemory => 'm',
            Self::Time => 't',
        }
    }

    /// The key for `letter` (either case), if one has it.
    pub fn from_letter(letter: char) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|k| k.letter() == letter.to_ascii_lowercase())
    }

    /// The key's name as the view's header writes it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Natural => "natural",
            Self::Pid => "PID",
            Self::User => "user",
            Self::Container => "container",
            Self::GpuMemory => "GPU memory",
            Self::Sm => "%SM",
            Self::MemoryBandwidth => "%GMBW",
            Self::Cpu => "%CPU",
            Self::HostMemory => "host memory",
            Self::Time => "time",
        }
    }

    /// Quantities sort largest first; identities (GPU, PID, user) ascending.
    pub fn descending_by_default(self) -> bool {
        !matches!(self, Self::Natural | Self::Pid | Self::User | Self::Container)
    }

    /// The key after this one in [`SortKey::ALL`], wrapping around.
    pub fn next(self) -> Self {
        let i = Self::ALL.iter().position(|k| *k == self).unwrap_or(0);
        Self::ALL[(i + 1) % Self::ALL.len()]
    }

    /// The key before this one in [`SortKey::ALL`], wrapping around.
    pub fn previous(self) -> Self {
        let i = Self::ALL.iter().position(|k| *k == self).unwrap_or(0);
        Self::ALL[(i + Self::ALL.len() - 1) % Self::ALL.len()]
    }
}

/// Unknown values sort last whatever the direction.
fn by_option<T: PartialOrd>(a: Option<T>, b: Option<T>, descending: bool) -> Ordering {
    match (a, b) {
        (Some(x), Some(y)) => {
            let order = x.partial_cmp(&y).unwrap_or(Ordering::Equal);
            if descending { order.reverse() } else { order }
        }
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// Sorts by `key`; `reverse` flips the key's default direction. Ties: GPU index, then PID.
pub fn by_key(processes: &mut [&GpuProcess], key: SortKey, reverse: bool) {
    processes.sort_by(|a, b| compare(a, b, key, reverse));
}

/// The order of two processes by `key` ([`by_key`]'s).
pub fn compare(a: &GpuProcess, b: &GpuProcess, key: SortKey, reverse: bool) -> Ordering {
    let descending = key.descending_by_default() != reverse;
    let primary = match key {
        SortKey::Natural => {
            let order = (a.gpu_index, a.pid).cmp(&(b.gpu_index, b.pid));
            if descending { order.reverse() } else { order }
        }
        SortKey::Pid => by_option(Some(a.pid), Some(b.pid), descending),
        SortKey::User => by_option(a.host.user.value(), b.host.user.value(), descending),
        SortKey::Container => by_option(
            a.host.container.as_ref().map(|c| c.label()),
            b.host.container.as_ref().map(|c| c.label()),
            descending,
        ),
        SortKey::GpuMemory => by_option(a.gpu_memory_bytes.get(), b.gpu_memory_bytes.get(), descending),
        SortKey::Sm => by_option(a.sm_percent.get(), b.sm_percent.get(), descending),
        SortKey::MemoryBandwidth => by_option(
            a.memory_bandwidth_percent.get(),
            b.memory_bandwidth_percent.get(),
            descending,
        ),
        SortKey::Cpu => by_option(a.host.cpu_percent.get(), b.host.cpu_percent.get(), descending),
        SortKey::HostMemory => by_option(a.host.memory_bytes.get(), b.host.memory_bytes.get(), descending),
        SortKey::Time => by_option(
            a.host.running_seconds.get(),
            b.host.running_seconds.get(),
            descending,
        ),
    };
    primary
        .then(a.gpu_index.cmp(&b.gpu_index))
        .then(a.pid.cmp(&b.pid))
}

/// Largest GPU memory first; unknown memory last; ties by GPU index, then PID.
pub fn by_gpu_memory(processes: &mut [GpuProcess]) {
    // GPU and PID make the order total: an unstable sort gives the same order as a stable
    // one. The positions are sorted, then the processes moved once into place: a process is
    // some 500 bytes, and sorting them in place moved each several times per refresh.
    let mut order: Vec<usize> = (0..processes.len()).collect();
    order.sort_unstable_by(|&a, &b| {
        let (a, b) = (&processes[a], &processes[b]);
        by_option(a.gpu_memory_bytes.get(), b.gpu_memory_bytes.get(), true)
            .then(a.gpu_index.cmp(&b.gpu_index))
            .then(a.pid.cmp(&b.pid))
    });
    arrange(processes, order);
}

/// Rearranges `items` so that position k holds the item that was at `order[k]` (`order` a
/// permutation), by swaps along each cycle of the permutation: at most one swap per item.
fn arrange<T>(items: &mut [T], mut order: Vec<usize>) {
    for start in 0..items.len() {
        let mut at = start;
        // Position `at` takes the item at `order[at]`; the one it held travels on along the
        // cycle until it reaches the position that asks for it, which closes the cycle.
        while order[at] != start {
            let from = order[at];
            items.swap(at, from);
            order[at] = at;
            at = from;
        }
        order[at] = at;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{HostFacts, ProcessType, Reading};

    fn process(pid: u32, gpu: u32, memory: Option<u64>) -> GpuProcess {
        GpuProcess {
            pid,
            gpu_index: gpu,
            gpu_uuid: Reading::NotSupported,
            kind: ProcessType::Compute,
            gpu_memory_bytes: memory.map_or(Reading::NotSupported, Reading::Value),
            sm_percent: Reading::Value(0),
            gpu_system_memory_bytes: Default::default(),
            engines_percent: Default::default(),
            memory_bandwidth_percent: Reading::Value(0),
            encoder_percent: Reading::Value(0),
            decoder_percent: Reading::Value(0),
            gpu_instance_id: None,
            compute_instance_id: None,
            host: HostFacts::gone(pid, "test"),
        }
    }

    #[test]
    fn largest_memory_first_unknown_last_then_gpu_and_pid() {
        let mut list = vec![
            process(5, 0, None),
            process(4, 1, Some(10)),
            process(3, 0, Some(10)),
            process(2, 0, Some(99)),
            process(1, 0, Some(10)),
        ];
        by_gpu_memory(&mut list);
        let order: Vec<u32> = list.iter().map(|p| p.pid).collect();
        assert_eq!(order, vec![2, 1, 3, 4, 5]);
    }

    #[test]
    fn arranging_by_an_order_puts_each_item_where_the_order_says() {
        // Every permutation of five items (cycles of every length), then a larger shuffle.
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut orders: Vec<Vec<usize>> = Vec::new();
        let mut permutation = vec![0, 1, 2, 3, 4];
        for _ in 0..120 {
            orders.push(permutation.clone());
            // The next permutation in lexicographic order (wrapping to the first).
            let Some(i) = (0..4).rev().find(|&i| permutation[i] < permutation[i + 1]) else {
                permutation.reverse();
                continue;
            };
            let j = (i + 1..5)
                .rev()
                .find(|&j| permutation[j] > permutation[i])
                .unwrap();
            permutation.swap(i, j);
            permutation[i + 1..].reverse();
        }
        let mut shuffled: Vec<usize> = (0..1000).collect();
        for i in (1..shuffled.len()).rev() {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            shuffled.swap(i, (seed % (i as u64 + 1)) as usize);
        }
        orders.push(shuffled);
        for order in orders {
            let mut items: Vec<String> = (0..order.len()).map(|i| format!("item{i}")).collect();
            let expected: Vec<String> = order.iter().map(|&i| items[i].clone()).collect();
            arrange(&mut items, order.clone());
            assert_eq!(items, expected, "order {order:?}");
        }
    }

    #[test]
    fn the_container_key_groups_a_containers_processes_host_last() {
        let in_container = |pid, id: &str| {
            let mut p = process(pid, 0, Some(1));
            p.host.container = Some(crate::model::Container::new(crate::model::Runtime::Docker, id).into());
            p
        };
        let list = [
            in_container(1, "bbbbbbbbbbbb"),
            process(2, 0, Some(1)),
            in_container(3, "aaaaaaaaaaaa"),
            in_container(4, "bbbbbbbbbbbb"),
        ];
        let mut refs: Vec<&GpuProcess> = list.iter().collect();
        by_key(&mut refs, SortKey::Container, false);
        assert_eq!(refs.iter().map(|p| p.pid).collect::<Vec<_>>(), vec![3, 1, 4, 2]);
        assert_eq!(SortKey::from_letter('k'), Some(SortKey::Container));
    }

    #[test]
    fn keys_cycle_and_directions_follow_the_key() {
        assert_eq!(SortKey::Time.next(), SortKey::Natural);
        assert_eq!(SortKey::Natural.previous(), SortKey::Time);
        assert_eq!(SortKey::from_letter('G'), Some(SortKey::GpuMemory));
        let list = [
            process(3, 1, Some(5)),
            process(1, 0, Some(9)),
            process(2, 0, None),
        ];
        let mut refs: Vec<&GpuProcess> = list.iter().collect();
        by_key(&mut refs, SortKey::Pid, false);
        assert_eq!(refs.iter().map(|p| p.pid).collect::<Vec<_>>(), vec![1, 2, 3]);
        by_key(&mut refs, SortKey::GpuMemory, false);
        assert_eq!(refs.iter().map(|p| p.pid).collect::<Vec<_>>(), vec![1, 3, 2]);
        by_key(&mut refs, SortKey::GpuMemory, true);
        assert_eq!(
            refs.iter().map(|p| p.pid).collect::<Vec<_>>(),
            vec![3, 1, 2],
            "unknown stays last"
        );
        by_key(&mut refs, SortKey::Natural, false);
        assert_eq!(refs.iter().map(|p| p.pid).collect::<Vec<_>>(), vec![1, 2, 3]);
    }
}
