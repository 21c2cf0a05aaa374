//! Process orderings.

use std::cmp::Ordering;

use crate::model::GpuProcess;

/// Largest GPU memory first; unknown memory last; ties by GPU index, then PID.
pub fn by_gpu_memory(processes: &mut [GpuProcess]) {
    processes.sort_by(|a, b| {
        match (a.gpu_memory_bytes.get(), b.gpu_memory_bytes.get()) {
            (Some(x), Some(y)) => y.cmp(&x),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        }
        .then(a.gpu_index.cmp(&b.gpu_index))
        .then(a.pid.cmp(&b.pid))
    });
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
            memory_bandwidth_percent: Reading::Value(0),
            encoder_percent: Reading::Value(0),
            decoder_percent: Reading::Value(0),
            host: HostFacts::gone("test"),
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
}
