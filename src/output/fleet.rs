//! The fleet's `--once` report (`--prometheus URL --once`, `--remote NODE --once`): the
//! summary, every node, the idle GPUs, the top processes, users and namespaces, as text in
//! the cluster screen's words, or as the fleet's JSON (`config/fleet.schema.json`).

use gputop_core::format::{rfc3339, sanitize, table};
use gputop_core::model::fleet::Fleet;

use crate::app::fleet::{self as cells, FleetView};

/// Idle GPUs listed at most (the summary counts them all).
const IDLE_LISTED: usize = 20;

/// The text report.
pub fn text(fleet: &Fleet) -> String {
    let mut out = format!("{}  {}\n", sanitize(&fleet.feed), rfc3339(fleet.taken_at));
    out.push_str(&cells::summary_line(&fleet.summary));
    out.push('\n');
    if let Some(age) = fleet.stale_seconds {
        out.push_str(&format!("data {age} s old\n"));
    }
    for problem in &fleet.problems {
        out.push_str(&format!("problem: {}\n", sanitize(problem)));
    }
    let mut view = FleetView::default();
    view.arrange(fleet);
    let section =
        |out: &mut String, title: &str, headings: &[&str], rows: Vec<Vec<String>>, right: &[bool]| {
            out.push('\n');
            if rows.is_empty() {
                out.push_str(&format!("{title}: none\n"));
                return;
            }
            out.push_str(&format!("{title}:\n"));
            let mut all = vec![headings.iter().map(|h| h.to_string()).collect::<Vec<_>>()];
            all.extend(rows);
            out.push_str(&table(&all, right));
        };
    let nodes = view
        .rows
        .iter()
        .map(|&i| cells::node_cells(&fleet.nodes[i]))
        .collect();
    section(
        &mut out,
        "nodes",
        &cells::NODE_HEADINGS,
        nodes,
        &cells::NODE_FIGURES,
    );
    let idle = fleet
        .idle_gpus
        .iter()
        .take(IDLE_LISTED)
        .map(|g| cells::idle_cells(g, fleet.idle_lookback_seconds))
        .collect();
    section(
        &mut out,
        "idle GPUs, longest idle first",
        &cells::IDLE_HEADINGS,
        idle,
        &cells::IDLE_FIGURES,
    );
    let top = fleet.top_processes.iter().map(cells::process_cells).collect();
    section(
        &mut out,
        "top processes by GPU memory",
        &cells::PROCESS_HEADINGS,
        top,
        &cells::PROCESS_FIGURES,
    );
    for (title, shares) in [("USER", &fleet.users), ("NAMESPACE", &fleet.namespaces)] {
        let mut headings = vec![title];
        headings.extend(cells::SHARE_HEADINGS);
        let rows = shares.iter().map(cells::share_cells).collect();
        let title = format!("GPU use per {}", title.to_lowercase());
        section(&mut out, &title, &headings, rows, &cells::SHARE_FIGURES);
    }
    out
}

/// The JSON report.
pub fn json(fleet: &Fleet) -> serde_json::Result<String> {
    let mut text = serde_json::to_string_pretty(fleet)?;
    text.push('\n');
    Ok(text)
}
