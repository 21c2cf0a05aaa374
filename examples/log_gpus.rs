//! Logs every GPU's memory and utilization once a second, with the utilization's mean over
//! the last 30 s as gputop's alerts judge it.
//!
//! ```sh
//! cargo run --example log_gpus                 # the machine's GPUs, until Ctrl-C
//! cargo run --example log_gpus -- --demo 5     # the built-in demo machine, 5 lines a GPU
//! ```

use std::error::Error;
use std::time::Duration;

use gputop_core::collector::Collector;
use gputop_core::config::Settings;
use gputop_core::monitor::Monitor;
use gputop_core::monitor::history::DeviceMetric;
use gputop_core::source::Source;

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let demo = args.iter().any(|a| a == "--demo");
    let count: Option<usize> = args.iter().find_map(|a| a.parse().ok());
    let source = if demo {
        Source::demo()
    } else {
        Source::local(None)?
    };
    let interval = Duration::from_secs(1);
    let collector = Collector::spawn(source, interval)?;
    let settings = Settings::default();
    let mut monitor = Monitor::new(&settings.history, &settings.alert, interval.as_secs_f64());
    let mut logged = 0;
    while count.is_none_or(|n| logged < n) {
        let Some(snapshot) = collector.next(Duration::from_secs(10)) else {
            return Err("no snapshot in 10 s: the driver is not answering".into());
        };
        monitor.ingest(&snapshot);
        let now = monitor.history().now().unwrap_or_default();
        for device in &snapshot.devices {
            let memory = device.memory().get().map_or("N/A".into(), |m| {
                format!("{} of {} MiB", m.used >> 20, m.total >> 20)
            });
            let utilization = device
                .utilization_gpu_percent
                .get()
                .map_or("N/A".into(), |u| format!("{u}%"));
            let mean = monitor
                .history()
                .device(device.index, DeviceMetric::Utilization)
                .and_then(|series| series.window(now - 30.0, now))
                .map_or("N/A".into(), |w| format!("{:.0}%", w.mean));
            println!(
                "GPU {}: memory {memory}, utilization {utilization} (30 s mean {mean})",
                device.index
            );
        }
        logged += 1;
    }
    Ok(())
}
