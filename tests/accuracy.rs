//! Burst accuracy through the simulated driver: gputop's interval means come from the
//! driver's sample buffer, so 200 ms bursts every 2 s are counted and their peak seen, where
//! a reader of the instantaneous value (what a point sampler shows) is far off.

mod common;

use gputop_core::source::nvml::{NvmlSource, SampledMetric};

/// Refreshes of one second, read half a second after each whole second.
const INTERVALS: u64 = 40;
const TRUE_UTILIZATION: f64 = 0.1 * 100.0 + 0.9 * 5.0;
const TRUE_POWER_W: f64 = 0.1 * 400.0 + 0.9 * 100.0;

#[test]
fn interval_means_from_the_sample_buffer_count_short_bursts() {
    let dir = common::sim_lib_dir();
    let lib = dir.path().join("libnvidia-ml.so.1");
    std::fs::copy(common::scenario("bursty"), dir.path().join("gputop-sim.toml")).unwrap();
    // SAFETY: loading our own simulator, whose constructors do nothing; the same instance
    // gputop opens below, so its clock control reaches it.
    let control = unsafe { libloading::Library::new(&lib) }.unwrap();
    let mut source = NvmlSource::open(Some(&lib)).expect("the simulator initialises");
    // SAFETY: the simulator exports this symbol with this signature.
    let set_time = unsafe { control.get::<unsafe extern "C" fn(u64)>(b"gputop_sim_set_time_ms") }.unwrap();
    let window = std::time::Duration::from_secs(1);

    // SAFETY: a plain function call into the simulator.
    unsafe { set_time(500) };
    source.read(window); // the first read takes what the buffer held before
    source.log_samples();
    let (mut means, mut peaks, mut points, mut power_means) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for second in 1..=INTERVALS {
        // SAFETY: as above.
        unsafe { set_time(second * 1000 + 500) };
        let readout = source.read(window);
        let gpu = &readout.devices[0];
        let consumed = source
            .take_samples()
            .iter()
            .filter(|s| s.gpu == 0 && s.metric == SampledMetric::GpuUtilization)
            .count();
        assert_eq!(
            consumed, 50,
            "one second of 20 ms samples, none twice, none missed"
        );
        means.push(
            gpu.utilization_gpu_mean_percent
                .get()
                .expect("a window of samples"),
        );
        peaks.push(
            gpu.utilization_gpu_peak_percent
                .get()
                .expect("a window of samples"),
        );
        points.push(f64::from(gpu.utilization_gpu_percent.get().unwrap()));
        power_means.push(gpu.power_usage_mean_watts.get().unwrap());
    }
    let average = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let gputop = average(&means);
    let point = average(&points);
    let power = average(&power_means);
    println!(
        "true mean {TRUE_UTILIZATION} %: gputop {gputop:.2} %, point sampler {point:.2} %; \
         power: true {TRUE_POWER_W} W, gputop {power:.2} W"
    );
    assert!((gputop - TRUE_UTILIZATION).abs() <= 3.0, "gputop's mean {gputop}");
    assert!(
        (power - TRUE_POWER_W).abs() <= 0.03 * TRUE_POWER_W,
        "gputop's power mean {power}"
    );
    assert!(
        (point - TRUE_UTILIZATION).abs() > 3.0,
        "the scenario must defeat a point sampler, which saw {point}"
    );
    let with_burst = peaks.iter().filter(|p| **p == 100.0).count();
    assert_eq!(
        with_burst as u64,
        INTERVALS / 2,
        "every burst's peak is seen: {peaks:?}"
    );
    assert!(
        points.iter().all(|p| *p < 100.0),
        "the point sampler never sees one"
    );
}
