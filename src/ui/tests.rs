//! ratatui TestBackend snapshots of every screen and dialog, at 80x24 and 200x50, from fixed
//! data. Review changes with `cargo insta review` (or INSTA_UPDATE=always, then git diff).

use std::sync::Arc;

use crate::app::filter::Selection;
use crate::app::state::{Action, App, Arrange, Go, Move, Received, Signal, Signalling};
use crate::ui::{self, theme::Theme};
use gputop_core::config::Settings;
use gputop_core::model::*;
use ratatui::Terminal;
use ratatui::backend::TestBackend;

#[path = "../../tests/common/fixtures.rs"]
mod fixtures;

use fixtures::{GIB, snapshot};

fn process_table() -> Vec<gputop_core::host::ProcessEntry> {
    [
        (1, 0, "systemd"),
        (900, 1, "sshd"),
        (4100, 900, "bash"),
        (4101, 4100, "python3"),
        (4102, 4101, "python3"),
        (4103, 4101, "pt_data_worker"),
        (5200, 1, "evil"),
        (777, 1, "cron"),
    ]
    .into_iter()
    .map(|(pid, parent_pid, name)| gputop_core::host::ProcessEntry {
        pid,
        parent_pid,
        name: name.into(),
    })
    .collect()
}

#[test]
fn the_tree_shows_ancestors_to_init_and_children_but_not_strangers() {
    let mut app = app();
    app.update(Action::Received(Received::ProcessTableRead(process_table())));
    let lines: Vec<(usize, u32)> = app.tree_lines().iter().map(|l| (l.depth, l.pid)).collect();
    assert_eq!(
        lines,
        vec![
            (0, 1),
            (1, 900),
            (2, 4100),
            (3, 4101),
            (4, 4102),
            (4, 4103),
            (1, 5200)
        ]
    );
}

/// The tree is prepared by `update`, not while drawing: on opening its screen, and again
/// after a process table or a snapshot; closing help over it brings it back as it was.
#[test]
fn the_tree_is_prepared_while_its_screen_is_open_and_kept_across_an_overlay() {
    let mut app = app();
    app.update(Action::Received(Received::ProcessTableRead(process_table())));
    assert!(
        app.view.tree.is_empty(),
        "nothing is prepared for the main screen"
    );
    app.update(Action::Go(Go::Tree));
    assert!(!app.view.tree.is_empty());
    assert_eq!(app.view.tree, app.tree_lines());
    app.update(Action::Go(Go::Help));
    app.update(Action::Go(Go::Back));
    assert_eq!(app.view.screen, crate::app::view::Screen::Tree);
    assert_eq!(app.view.tree, app.tree_lines(), "back from help");
    app.update(Action::Go(Go::Tree));
    assert!(app.view.tree.is_empty(), "the tree closed");
}

/// The view after 30 s of the fixture's snapshot at the default 2 s refresh: a full window
/// for the alert rules, so the engine's alerts are on screen.
fn app() -> App {
    let mut app = App::new(Settings::default(), Selection::default(), false, Some(1000));
    let base = snapshot();
    for step in 0..16u64 {
        let mut snap = base.clone();
        snap.taken_at = base.taken_at + std::time::Duration::from_secs(2 * step);
        app.update(Action::Received(Received::Snapshot(Arc::new(snap))));
    }
    app.view.status = None;
    app
}

fn render(app: &mut App, theme: &Theme, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    let mut geometry = ui::TableGeometry::default();
    terminal
        .draw(|frame| {
            geometry = ui::draw(frame.buffer_mut(), app, theme);
        })
        .unwrap();
    // What the runtime does after a frame: tell the view how the text screen landed.
    if let Some(text) = geometry.text {
        app.update(Action::Received(Received::TextRows {
            page: text.page,
            last_top: text.last_top,
        }));
    }
    // Text only: styles are checked by the assertions that need them. (TestBackend cannot
    // print a zero-width buffer; drawing into it is what must not panic.)
    if width == 0 {
        String::new()
    } else {
        format!("{}", terminal.backend())
    }
}

const DARK: Theme = Theme {
    color: true,
    ascii: false,
    light: false,
};
const ASCII: Theme = Theme {
    color: false,
    ascii: true,
    light: false,
};

fn both_sizes(name: &str, mut setup: impl FnMut(&mut App), theme: &Theme) {
    for (w, h) in [(80, 24), (200, 50)] {
        let mut app = app();
        setup(&mut app);
        let screen = render(&mut app, theme, w, h);
        insta::assert_snapshot!(format!("{name}_{w}x{h}"), screen);
    }
}

#[test]
fn main_screen() {
    both_sizes(
        "main",
        |app| {
            app.update(Action::Move(Move::Down));
        },
        &DARK,
    );
}

#[test]
fn main_screen_in_ascii_without_colour() {
    both_sizes(
        "main_ascii",
        |app| {
            app.update(Action::Move(Move::Down));
        },
        &ASCII,
    );
}

#[test]
fn main_screen_filtered() {
    both_sizes(
        "filtered",
        |app| {
            app.update(Action::Arrange(Arrange::StartFilter));
            for c in "user:alice mem>8G".chars() {
                app.update(Action::Arrange(Arrange::FilterInput(c)));
            }
        },
        &DARK,
    );
}

#[test]
fn confirmation_dialog() {
    both_sizes(
        "confirm",
        |app| {
            app.update(Action::Move(Move::Down));
            app.update(Action::Signalling(Signalling::Tag));
            app.update(Action::Signalling(Signalling::Tag));
            app.update(Action::Signalling(Signalling::AskSignal(Signal::Kill)));
        },
        &DARK,
    );
}

#[test]
fn help_screen() {
    both_sizes(
        "help",
        |app| {
            app.update(Action::Go(Go::Help));
        },
        &DARK,
    );
}

/// At 160x45 the help is longer than the screen: its keys scroll it to the end, and the
/// footer's hints are keys the main screen's table binds.
#[test]
fn the_help_scrolls_to_its_last_line_and_the_footer_comes_from_the_key_table() {
    let mut app = app();
    app.update(Action::Go(Go::Help));
    let last = "Press any other key to go back.";
    assert!(
        !render(&mut app, &DARK, 160, 45).contains(last),
        "the help fits: nothing to scroll"
    );
    let page_down = ratatui_crossterm::crossterm::event::KeyEvent::from(
        ratatui_crossterm::crossterm::event::KeyCode::PageDown,
    );
    for _ in 0..10 {
        let action = crate::app::keymap::decode(&app, &page_down).expect("PgDn is bound on help");
        app.update(action);
    }
    assert_eq!(app.view.screen, crate::app::view::Screen::Help);
    assert!(render(&mut app, &DARK, 160, 45).contains(last));
    app.update(Action::Go(Go::Back));
    let footer = crate::app::keymap::footer_hints(true, 200);
    assert!(
        footer.starts_with("h help") && footer.ends_with("q quit"),
        "{footer}"
    );
    assert!(footer.contains("K SIGKILL"));
    assert!(!crate::app::keymap::footer_hints(false, 200).contains("SIGKILL"));
    let narrow = crate::app::keymap::footer_hints(true, 78);
    assert!(
        narrow.len() <= 78 && narrow.starts_with("h help") && narrow.ends_with("q quit"),
        "{narrow}"
    );
    assert!(render(&mut app, &DARK, 200, 50).contains(&footer));
}

#[test]
fn details_screen() {
    both_sizes(
        "details",
        |app| {
            app.update(Action::Move(Move::Down));
            app.update(Action::Go(Go::Details));
        },
        &DARK,
    );
}

#[test]
fn environment_screen() {
    both_sizes(
        "environment",
        |app| {
            app.update(Action::Move(Move::Down));
            app.update(Action::Go(Go::Environment));
            app.update(Action::Received(Received::EnvironmentRead(Ok(vec![
                "PATH=/usr/bin".into(),
                "EVIL=\u{1b}[31mred".into(),
            ]))));
        },
        &DARK,
    );
}

#[test]
fn tree_screen() {
    both_sizes(
        "tree",
        |app| {
            app.update(Action::Go(Go::Tree));
            app.update(Action::Received(Received::ProcessTableRead(process_table())));
        },
        &DARK,
    );
}

#[test]
fn too_small_and_tiny_terminals_never_panic() {
    for (w, h) in [(0, 0), (1, 1), (10, 3), (59, 30), (200, 11)] {
        let mut app = app();
        let screen = render(&mut app, &DARK, w, h);
        if w >= 20 && h >= 3 {
            assert!(screen.contains("too small"), "{w}x{h}: {screen}");
        }
    }
    insta::assert_snapshot!("too_small", render(&mut app(), &DARK, 59, 12));
}

#[test]
fn hostile_text_is_escaped_on_every_screen() {
    for setup in [
        Action::Go(Go::Help),
        Action::Go(Go::Tree),
        Action::Go(Go::Details),
    ] {
        let mut app = app();
        app.update(Action::Move(Move::End));
        app.update(setup);
        let screen = render(&mut app, &DARK, 200, 50);
        assert!(
            !screen.contains('\u{1b}') && !screen.contains('\u{202e}'),
            "{screen}"
        );
    }
}

fn buffer(app: &mut App, theme: &Theme) -> ratatui::buffer::Buffer {
    let mut terminal = Terminal::new(TestBackend::new(200, 50)).unwrap();
    terminal
        .draw(|frame| {
            ui::draw(frame.buffer_mut(), app, theme);
        })
        .unwrap();
    terminal.backend().buffer().clone()
}

/// The cells of the screen line that contains `needle`.
fn line_cells<'a>(buffer: &'a ratatui::buffer::Buffer, needle: &str) -> Vec<&'a ratatui::buffer::Cell> {
    let width = buffer.area.width as usize;
    let rows: Vec<String> = buffer
        .content
        .chunks(width)
        .map(|r| r.iter().map(|c| c.symbol()).collect())
        .collect();
    let y = rows
        .iter()
        .position(|r| r.contains(needle))
        .unwrap_or_else(|| panic!("{needle} not on screen"));
    buffer.content[y * width..(y + 1) * width].iter().collect()
}

#[test]
fn styles_mark_load_selection_other_users_and_lost_gpus() {
    use ratatui::style::{Color, Modifier};
    let mut app = app();
    app.update(Action::Move(Move::Down));
    let screen = buffer(&mut app, &DARK);
    // GPU 0 is at 88% memory: its bar is red (heavy), GPU 1 at 15% yellow (moderate).
    let gpu0 = line_cells(&screen, "! 0 NVIDIA");
    assert!(gpu0.iter().any(|c| c.symbol() == "█" && c.fg == Color::Red));
    let gpu1 = line_cells(&screen, "  1 NVIDIA");
    assert!(gpu1.iter().any(|c| c.symbol() == "█" && c.fg == Color::Yellow));
    let lost = line_cells(&screen, "LOST: GPU is lost");
    assert!(lost.iter().any(|c| c.symbol() == "L" && c.fg == Color::Red));
    // The selected row (the first) stands out; bob's row (uid 1001, not ours) is dimmed.
    let selected = line_cells(&screen, "python3 train.py");
    assert!(selected.iter().all(|c| c.bg == Color::Cyan));
    let other = line_cells(&screen, "evil");
    assert!(other.iter().any(|c| c.modifier.contains(Modifier::DIM)));
    // Without colour nothing is coloured, and the selection is reverse video.
    let plain = buffer(&mut app, &ASCII);
    assert!(
        plain
            .content
            .iter()
            .all(|c| c.fg == Color::Reset && c.bg == Color::Reset)
    );
    let selected = line_cells(&plain, "python3 train.py");
    assert!(selected.iter().all(|c| c.modifier.contains(Modifier::REVERSED)));
    assert!(
        !plain
            .content
            .iter()
            .any(|c| c.symbol() == "█" || c.symbol() == "▼"),
        "ASCII only"
    );
}

/// The rows are arranged again before the filter's effects on the selection are judged: a
/// filter that hides the selected process drops the selection.
#[test]
fn a_filter_that_hides_the_selected_process_drops_the_selection() {
    let mut app = app();
    app.update(Action::Move(Move::Down)); // the first row: alice's 4101
    app.update(Action::Move(Move::Down)); // bob's 5200, second by GPU memory
    assert_eq!(app.selected_process().map(|p| p.pid), Some(5200));
    // One key: `y` matches alice's two python3 commands, not bob's.
    app.update(Action::Arrange(Arrange::StartFilter));
    app.update(Action::Arrange(Arrange::FilterInput('y')));
    let pids: Vec<u32> = app.rows().iter().map(|p| p.pid).collect();
    assert_eq!(pids, [4101, 4102]);
    assert_eq!(app.view.selected, None);
}

#[test]
fn the_selection_follows_its_process_across_refreshes_and_re_sorts() {
    let mut app = app();
    app.update(Action::Move(Move::End)); // the smallest GPU memory: pid 4102
    assert_eq!(app.selected_process().map(|p| p.pid), Some(4102));
    // Next refresh: 4102 grows to the top.
    let mut next = snapshot();
    next.processes[1].gpu_memory_bytes = Reading::Value(70 * GIB);
    app.update(Action::Received(Received::Snapshot(Arc::new(next))));
    assert_eq!(app.rows()[0].pid, 4102);
    assert_eq!(app.selected_process().map(|p| p.pid), Some(4102));
    app.update(Action::Arrange(Arrange::SortBy {
        key: gputop_core::model::order::SortKey::Pid,
        reverse: true,
    }));
    assert_eq!(app.selected_process().map(|p| p.pid), Some(4102));
    // A new process under the same PID (another start time) is not the selected one.
    let mut replaced = snapshot();
    replaced.processes[1].host.start_time = Reading::Value(1);
    app.update(Action::Received(Received::Snapshot(Arc::new(replaced))));
    assert_eq!(app.selected_process().map(|p| p.pid), None);
}

#[test]
fn long_command_lines_scroll_sideways() {
    let mut app = app();
    let before = render(&mut app, &DARK, 120, 24);
    assert!(before.contains("python3 train.py --model llama-7b"));
    app.update(Action::Move(Move::ScrollCommand(Some(8))));
    let after = render(&mut app, &DARK, 120, 24);
    assert!(
        after.contains(" train.py --model llama-7b") && !after.contains("python3 train.py"),
        "{after}"
    );
    app.update(Action::Move(Move::ScrollCommand(None)));
    assert_eq!(render(&mut app, &DARK, 120, 24), before);
}

#[test]
fn a_snapshot_makes_its_own_process_table_for_the_demo() {
    let table = gputop_core::host::table_of(&snapshot());
    let rows: Vec<(u32, u32, &str)> = table
        .iter()
        .map(|e| (e.pid, e.parent_pid, e.name.as_str()))
        .collect();
    assert_eq!(
        rows,
        vec![(4101, 1, "python3"), (4102, 4101, "python3"), (5200, 1, "evil")]
    );
}

#[test]
fn layout_modes_choose_one_or_two_lines_per_gpu() {
    use crate::app::view::LayoutMode;
    let second_line = "SM 1980MHz  MCLK 2619MHz";
    let mut app = app();
    assert!(
        render(&mut app, &DARK, 200, 50).contains(second_line),
        "auto: room for two lines"
    );
    assert!(
        !render(&mut app, &DARK, 200, 14).contains(second_line),
        "auto: too short for two"
    );
    app.update(Action::Go(Go::Layout(LayoutMode::Compact)));
    assert!(!render(&mut app, &DARK, 200, 50).contains(second_line));
    app.update(Action::Go(Go::Layout(LayoutMode::Full)));
    assert!(render(&mut app, &DARK, 200, 14).contains(second_line));
}

/// Eleven minutes of history at the default 2 s refresh: GPU 0 heats from 60 to 90 C, its
/// utilization alternates every minute, and PID 4101's GPU memory leaks steadily.
fn app_with_history() -> App {
    let mut app = App::new(Settings::default(), Selection::default(), false, Some(1000));
    let base = snapshot();
    let start = base.taken_at;
    for step in 0..330u64 {
        let mut s = base.clone();
        let seconds = step * 2;
        s.taken_at = start + std::time::Duration::from_secs(seconds);
        // The energy counters advance at each GPU's power draw (W times s is J).
        for d in &mut s.devices {
            if let (Some(watts), Reading::Value(joules)) = (d.power_usage_watts.get(), &mut d.energy_joules) {
                *joules += watts * seconds as f64;
            }
        }
        let gpu = &mut s.devices[0];
        gpu.temperature_celsius = Reading::Value(60 + (30 * seconds / 660) as u32);
        let util = if (seconds / 60) % 2 == 0 { 95.0 } else { 40.0 };
        gpu.utilization_gpu_mean_percent = Reading::Value(util);
        gpu.utilization_gpu_peak_percent = Reading::Value(100.0);
        gpu.power_usage_mean_watts = Reading::Value(util * 6.0);
        gpu.power_usage_peak_watts = Reading::Value(650.0);
        s.processes[0].gpu_memory_bytes = Reading::Value(40 * GIB + seconds * 16 * (1 << 20));
        app.update(Action::Received(Received::Snapshot(Arc::new(s))));
    }
    app.view.status = None;
    app
}

#[test]
fn charts_alerts_and_the_alert_panel() {
    let mut app = app_with_history();
    let firing: Vec<String> = app
        .data
        .monitor
        .alerts()
        .active()
        .iter()
        .map(|a| a.rule.clone())
        .collect();
    assert!(
        firing.contains(&"gpu_temperature_critical".to_string())
            && firing.contains(&"process_memory_leak".to_string()),
        "{firing:?}"
    );
    insta::assert_snapshot!("main_with_alerts_200x50", render(&mut app, &DARK, 200, 50));
    // A critical alert paints its GPU's index and its process's row in the alert colours;
    // the GPU without one keeps plain colours.
    {
        use ratatui::style::Color;
        let screen = buffer(&mut app, &DARK);
        let gpu0 = line_cells(&screen, "! 0 NVIDIA");
        assert!(
            gpu0.iter().any(|c| c.symbol() == "0" && c.bg == Color::Red),
            "GPU 0 highlighted"
        );
        let gpu1 = line_cells(&screen, "  1 NVIDIA");
        assert!(
            gpu1.iter().all(|c| c.bg != Color::Red),
            "GPU 1 has no critical alert"
        );
        let leaking = line_cells(&screen, "python3 train.py");
        assert!(
            leaking.iter().all(|c| c.bg == Color::Red),
            "the leaking process's row"
        );
    }
    app.update(Action::Go(Go::Charts));
    for (w, h) in [(80, 24), (200, 50)] {
        insta::assert_snapshot!(format!("charts_{w}x{h}"), render(&mut app, &DARK, w, h));
    }
    insta::assert_snapshot!("charts_ascii_80x24", render(&mut app, &ASCII, 80, 24));
    app.update(Action::Go(Go::ChartDevice(1)));
    app.update(Action::Go(Go::ChartSpan));
    insta::assert_snapshot!("charts_gpu1_1h_200x50", render(&mut app, &DARK, 200, 50));
    app.update(Action::Go(Go::Back));
    app.update(Action::Go(Go::AlertLog));
    for (w, h) in [(80, 24), (200, 50)] {
        insta::assert_snapshot!(format!("alerts_{w}x{h}"), render(&mut app, &DARK, w, h));
    }
    app.update(Action::Go(Go::Back));
    app.update(Action::Move(Move::Down));
    app.update(Action::Go(Go::Details));
    insta::assert_snapshot!("details_with_charts_200x50", render(&mut app, &DARK, 200, 50));
}

#[test]
fn users_screen_accumulates_gpu_time_per_user_and_container() {
    let mut app = app_with_history();
    // 330 snapshots 2 s apart: 658 s. alice holds GPU 0 throughout; bob GPU 1, in Docker.
    let alice = &app.data.monitor.usage().users["alice"];
    assert!((alice.gpu_seconds - 658.0).abs() < 1e-6, "{}", alice.gpu_seconds);
    assert_eq!(alice.processes, 2);
    // GPU 0 draws 300 W, all of it alice's processes'.
    assert!(
        (alice.energy_joules - 300.0 * 658.0).abs() < 1e-6,
        "{}",
        alice.energy_joules
    );
    assert!((app.data.monitor.usage().containers["docker:3f2a1b9c0d12"].gpu_seconds - 658.0).abs() < 1e-6);
    app.update(Action::Go(Go::Users));
    for (w, h) in [(80, 24), (200, 50)] {
        insta::assert_snapshot!(format!("users_{w}x{h}"), render(&mut app, &DARK, w, h));
    }
    let screen = render(&mut app, &DARK, 200, 50);
    assert!(screen.contains("0:10:58"), "{screen}");
    app.update(Action::Go(Go::Users));
    assert_eq!(
        app.view.screen,
        crate::app::view::Screen::Main,
        "u again goes back"
    );
}

/// A MIG-enabled GPU lists its MIG devices under it; its processes show GPU/GI/CI.
#[test]
fn mig_devices_are_child_rows_and_processes_name_theirs() {
    let mut snap = snapshot();
    let id = |gpu_instance| MigId {
        gpu_instance,
        compute_instance: 0,
    };
    snap.devices[1].mig_mode = Reading::Value(true);
    snap.devices[1].mig_devices = [(1, "3g.40gb", 11), (5, "2g.20gb", 0)]
        .into_iter()
        .map(|(gi, profile, used_gib)| {
            let mut mig = MigDevice {
                profile: Reading::Value(profile.into()),
                uuid: Reading::Value(format!("MIG-{gi:08}-0000-5000-9000-000000000000")),
                ..MigDevice::new(id(gi))
            };
            mig.set_memory(Reading::Value(Memory {
                total: 40 * GIB,
                used: used_gib * GIB,
                free: (40 - used_gib) * GIB,
                reserved: 0,
            }));
            mig
        })
        .collect();
    snap.processes[1].gpu_instance_id = Some(id(1).gpu_instance);
    snap.processes[1].compute_instance_id = Some(id(1).compute_instance);
    snap.processes[1].gpu_index = 1;
    let mut app = App::new(Settings::default(), Selection::default(), false, Some(1000));
    app.update(Action::Received(Received::Snapshot(Arc::new(snap))));
    for (w, h) in [(80, 24), (200, 50)] {
        let screen = render(&mut app, &DARK, w, h);
        assert!(screen.contains("MIG 1/0 3g.40gb"), "{screen}");
        assert!(screen.contains("1/1/0"), "the process's GPU/GI/CI: {screen}");
        insta::assert_snapshot!(format!("main_mig_{w}x{h}"), screen);
    }
}

#[test]
fn old_data_says_how_old_and_what_has_not_returned() {
    let stale = |app: &mut App| {
        app.update(Action::Received(Received::Stale(Some(
            crate::app::state::Stale {
                age_seconds: 12,
                waiting_on: Some("nvmlDeviceGet*RunningProcesses on GPU 0".into()),
            },
        ))));
    };
    both_sizes("stale", stale, &DARK);
    let mut opening = App::new(Settings::default(), Selection::default(), false, Some(1000));
    opening.update(Action::Received(Received::Stale(Some(
        crate::app::state::Stale {
            age_seconds: 3,
            waiting_on: Some("opening NVML (nvmlInit)".into()),
        },
    ))));
    insta::assert_snapshot!("opening_80x24", render(&mut opening, &DARK, 80, 24));
}

#[test]
fn a_gpu_whose_process_list_was_refused_says_why() {
    let mut snap = snapshot();
    snap.processes.clear();
    snap.devices[0].process_list_error = Some("process list needs root on MIG GPUs".into());
    let mut app = App::new(Settings::default(), Selection::default(), false, Some(1000));
    app.update(Action::Received(Received::Snapshot(Arc::new(snap))));
    insta::assert_snapshot!("unlisted_80x24", render(&mut app, &DARK, 80, 24));
}

#[test]
fn every_sortable_column_shows_its_arrow_when_sorted() {
    use gputop_core::model::order::SortKey;
    let mut app = app();
    for (key, column) in [
        (SortKey::Natural, "GPU"),
        (SortKey::Pid, "PID"),
        (SortKey::User, "USER"),
        (SortKey::Container, "CONTAINER"),
        (SortKey::GpuMemory, "GPU-MEM"),
        (SortKey::Sm, "%SM"),
        (SortKey::MemoryBandwidth, "%GMBW"),
        (SortKey::Cpu, "%CPU"),
        (SortKey::HostMemory, "%MEM"),
        (SortKey::Time, "TIME"),
    ] {
        for reverse in [false, true] {
            app.update(Action::Arrange(Arrange::SortBy { key, reverse }));
            let screen = render(&mut app, &DARK, 200, 50);
            let header = screen
                .lines()
                .find(|l| l.contains("COMMAND"))
                .unwrap_or_else(|| panic!("no table header: {screen}"));
            assert!(
                header.contains(&format!("{column}▲")) || header.contains(&format!("{column}▼")),
                "{key:?}: no arrow after {column} in {header}"
            );
        }
    }
}

/// The alerts screen at 80x24: long lines end in `…`, Right shifts them (a `…` then marks
/// the cut start), and no key scrolls past the last line.
#[test]
fn the_alerts_screen_scrolls_sideways_and_never_past_its_end() {
    let mut app = app_with_history();
    app.update(Action::Go(Go::AlertLog));
    let first = render(&mut app, &DARK, 80, 24);
    let cut = first
        .lines()
        .find(|l| l.contains("GPU hotter than 85"))
        .unwrap()
        .to_string();
    assert!(cut.ends_with("…│\""), "{cut}");
    app.update(Action::Move(Move::ScrollCommand(Some(8))));
    let shifted = render(&mut app, &DARK, 80, 24);
    assert!(
        shifted
            .lines()
            .any(|l| l.starts_with("\"│…") && l.contains("hotter than 85")),
        "{shifted}"
    );
    app.update(Action::Move(Move::ScrollCommand(None)));
    app.update(Action::Move(Move::End));
    let end = render(&mut app, &DARK, 80, 24);
    let last_top = app.view.text_scroll;
    assert!(last_top > 0, "the screen is longer than 22 rows");
    for _ in 0..5 {
        app.update(Action::Move(Move::Down));
        app.update(Action::Move(Move::PageDown));
    }
    assert_eq!(app.view.text_scroll, last_top, "not past the end");
    assert_eq!(render(&mut app, &DARK, 80, 24), end);
    app.update(Action::Move(Move::Home));
    assert_eq!(app.view.text_scroll, 0);
}

#[test]
fn processes_that_could_not_be_read_are_counted_on_the_status_line_and_in_once() {
    let mut snap = snapshot();
    snap.hidden_processes = 2;
    let note = "2 processes hidden: another user's GPU use needs root or CAP_SYS_PTRACE";
    let report =
        crate::output::report::text_report(&snap, &Settings::default().display.default_metrics, &[], None);
    assert!(report.contains(note), "{report}");
    let mut app = App::new(Settings::default(), Selection::default(), false, Some(1000));
    app.update(Action::Received(Received::Snapshot(Arc::new(snap))));
    let screen = render(&mut app, &DARK, 160, 30);
    assert!(screen.contains(note), "{screen}");
}

#[test]
fn an_amd_or_intel_process_shows_its_engines_and_system_memory_in_its_details() {
    let mut snap = snapshot();
    for p in &mut snap.processes {
        p.engines_percent = [(Engine::Graphics, 60.0), (Engine::Compute, 10.0)].into();
        p.gpu_system_memory_bytes = Reading::Value(8 << 20);
        p.sm_percent = Reading::Value(70);
    }
    let mut app = App::new(Settings::default(), Selection::default(), false, Some(1000));
    app.update(Action::Received(Received::Snapshot(Arc::new(snap))));
    app.update(Action::Move(Move::Down));
    app.update(Action::Go(Go::Details));
    let screen = render(&mut app, &DARK, 160, 40);
    assert!(
        screen.contains("(system 8.0MiB)  %GPU 70  engines: graphics 60%, compute 10%"),
        "{screen}"
    );
}
