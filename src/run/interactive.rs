//! The interactive runtime: one event loop fed by the collector, the keyboard/mouse thread
//! and a signal thread. It turns events into actions, runs the effects `update` returns
//! (signals, /proc reads, suspend) and redraws only after something happened.

use std::sync::Arc;
use std::sync::mpsc::{self, Sender};
use std::thread;
use std::time::Duration;

use ratatui_crossterm::crossterm::event::{
    self, Event as TermEvent, KeyEventKind, MouseButton, MouseEventKind,
};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::app::filter::Selection;
use crate::app::keymap;
use crate::app::state::{Action, App, Arrange, Effect, Move, Origin, Received, Stale};
use crate::app::view::Screen;
use crate::signal;
use crate::term::Term;
use crate::ui::{self, TableGeometry, theme::Theme};
use gputop_core::collector::Collector;
use gputop_core::config::Settings;
use gputop_core::host::HostCollector;
use gputop_core::model::Snapshot;
use gputop_core::model::fleet::Fleet;
use gputop_core::monitor::alerts::sink::Sink;
use gputop_core::source::http::Endpoint;
use gputop_core::source::nvml::NvmlUnusable;
use gputop_core::source::prometheus::{self, Prometheus};
use gputop_core::source::remote;
use gputop_core::source::replay::{Playback, ReplayStatus};
use gputop_core::source::{Opening, Source};

/// Where the snapshots come from.
#[derive(Debug)]
pub enum Feed {
    /// A source the collector reads: NVML, the demo, or a recording ([`Source::replay`]).
    Source(Source),
    /// A live source still opening: the view shows that it waits, and how long.
    Opening(Opening),
    /// Other machines' `gputop export`, asked by gputop itself.
    Remote(Vec<Endpoint>),
    /// The fleet from Prometheus.
    Prometheus(Prometheus),
}

/// What asks for the fleet: one poller or the other, behind one screen.
#[derive(Debug)]
enum FleetPoller {
    // Held for its threads: dropping it stops the polling.
    Nodes(#[expect(dead_code, reason = "held, never read")] remote::Poller),
    Prometheus(prometheus::Poller),
}

/// A replayed frame, with where playback stands.
struct Played {
    snapshot: Arc<Snapshot>,
    status: ReplayStatus,
    /// The frame is earlier than the one before it: history must start over.
    rewound: bool,
}

/// What wakes the loop.
enum Event {
    /// The source of [`Feed::Opening`] opened, or could not be.
    Opened(Result<Source, NvmlUnusable>),
    Snapshot(Arc<Snapshot>),
    Replayed(Played),
    Fleet(Arc<Fleet>),
    Terminal(TermEvent),
    /// The terminal is gone (read failed): quit instead of spinning.
    TerminalClosed,
    /// Nothing arrived for [`STALE_CHECK`].
    Tick,
    /// SIGTERM, SIGHUP or SIGINT from outside.
    Signal(i32),
}

/// How the interactive view ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    Quit,
    /// Ended by this signal; the exit status is 128 + signal.
    Signal(i32),
    TerminalClosed,
    /// The source could not be opened.
    Failed(NvmlUnusable),
}

/// How often the view looks whether the data has grown old.
const STALE_CHECK: Duration = Duration::from_secs(1);

/// How long a status line message stays before the key hints come back.
const MESSAGE_SHOWN: Duration = Duration::from_secs(5);

/// The status line's message and since when it has been shown.
struct MessageClock {
    shown: Option<String>,
    since: std::time::Instant,
}

impl MessageClock {
    /// Whether the app's message has been on screen for [`MESSAGE_SHOWN`]; a new message
    /// starts the clock again.
    fn expired(&mut self, app: &App) -> bool {
        if app.view.status != self.shown {
            self.shown.clone_from(&app.view.status);
            self.since = std::time::Instant::now();
            return false;
        }
        self.shown.is_some() && self.since.elapsed() >= MESSAGE_SHOWN
    }
}

fn spawn_input(events: Sender<Event>) {
    let _ = thread::Builder::new().name("gputop-input".into()).spawn(move || {
        loop {
            let event = match event::read() {
                Ok(event) => Event::Terminal(event),
                Err(_) => Event::TerminalClosed,
            };
            let closed = matches!(event, Event::TerminalClosed);
            if events.send(event).is_err() || closed {
                return;
            }
        }
    });
}

fn spawn_signals(events: Sender<Event>) -> std::io::Result<signal_hook::iterator::Handle> {
    let mut signals = Signals::new([SIGTERM, SIGHUP, SIGINT])?;
    let handle = signals.handle();
    thread::Builder::new()
        .name("gputop-signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                if events.send(Event::Signal(signal)).is_err() {
                    return;
                }
            }
        })?;
    Ok(handle)
}

/// Draws the view and tells it how many process rows the table showed (paging moves by them).
fn draw(tui: &mut Term, app: &mut App, theme: &Theme) -> std::io::Result<TableGeometry> {
    let geometry = tui.draw(|buffer| ui::draw(buffer, app, theme))?;
    if geometry.rows > 0 && usize::from(geometry.rows) != app.view.table_rows {
        app.update(Action::Received(Received::TableRows(usize::from(geometry.rows))));
    }
    if let Some(text) = geometry.text
        && (text.page, text.last_top) != (app.view.text_page, app.view.text_last_top)
    {
        app.update(Action::Received(Received::TextRows {
            page: text.page,
            last_top: text.last_top,
        }));
    }
    Ok(geometry)
}

/// Mouse: a click on a row selects it, on a header sorts by it; the wheel moves the selection.
fn mouse_action(
    app: &App,
    geometry: &TableGeometry,
    kind: MouseEventKind,
    column: u16,
    row: u16,
) -> Option<Action> {
    if app.view.screen != Screen::Main || app.view.confirmation.is_some() {
        return None;
    }
    match kind {
        MouseEventKind::ScrollDown => Some(Action::Move(Move::Scroll(1))),
        MouseEventKind::ScrollUp => Some(Action::Move(Move::Scroll(-1))),
        MouseEventKind::Down(MouseButton::Left | MouseButton::Right) => {
            if row == geometry.header_y {
                let (_, _, key) = geometry
                    .columns
                    .iter()
                    .find(|(x0, x1, _)| (*x0..*x1).contains(&column))?;
                let reverse = app.view.sort == *key && !app.view.reverse;
                Some(Action::Arrange(Arrange::SortBy { key: *key, reverse }))
            } else if row >= geometry.first_row_y && row < geometry.first_row_y + geometry.rows {
                Some(Action::Move(Move::ClickRow(usize::from(
                    row - geometry.first_row_y,
                ))))
            } else {
                None
            }
        }
        _ => None,
    }
}

/// Runs the interactive view until the user quits, a signal arrives or the terminal goes.
pub fn run(
    feed: Feed,
    settings: &Settings,
    selection: Selection,
    readonly: bool,
    theme: Theme,
    mut sink: Sink,
) -> std::io::Result<Ending> {
    // The demo's (and a recording's, and a node's) PIDs are not this host's: their tree
    // comes from the snapshot, never from /proc, and they are never signalled.
    let origin = match &feed {
        Feed::Source(Source::Local(_)) | Feed::Opening(_) => Origin::Live,
        Feed::Source(Source::Demo(_)) => Origin::Demo,
        Feed::Source(Source::Replay(_)) => Origin::Recording,
        Feed::Remote(_) | Feed::Prometheus(_) => Origin::Remote,
    };
    let real_host = origin == Origin::Live;
    let interval = Duration::from_secs_f64(settings.display.refresh_interval);
    let pods_socket = settings.collect.pod_resources_socket.as_str();
    let (events, inbox) = mpsc::channel();
    let (snapshots, replayed, polled) = (events.clone(), events.clone(), events.clone());
    let mut poller = None;
    let remote = matches!(feed, Feed::Remote(_) | Feed::Prometheus(_));
    let started = std::time::Instant::now();
    let (mut collector, replay) = match feed {
        Feed::Source(source) => match source.playback() {
            Some(playback) => (None, Some(spawn_replay(source, playback, interval, replayed)?)),
            None => (
                Some(spawn_collector(source, interval, pods_socket, snapshots.clone())?),
                None,
            ),
        },
        Feed::Opening(opening) => {
            let opened = events.clone();
            thread::Builder::new()
                .name("gputop-opened".into())
                .spawn(move || {
                    let _ = opened.send(Event::Opened(opening.finish()));
                })?;
            (None, None)
        }
        Feed::Remote(nodes) => {
            poller = Some(FleetPoller::Nodes(remote::Poller::spawn(
                nodes,
                interval,
                Box::new(move |fleet| polled.send(Event::Fleet(fleet)).is_ok()),
            )?));
            (None, None)
        }
        Feed::Prometheus(client) => {
            poller = Some(FleetPoller::Prometheus(prometheus::Poller::spawn(
                client,
                interval,
                Box::new(move |fleet| polled.send(Event::Fleet(fleet)).is_ok()),
            )?));
            (None, None)
        }
    };
    let signal_handle = spawn_signals(events.clone())?;
    let mut tui = Term::enter()?;
    spawn_input(events);
    // SAFETY: getuid has no preconditions.
    let my_uid = Some(unsafe { libc::getuid() });
    let mut app = App::new(settings.clone(), selection, readonly, my_uid);
    app.data.origin = origin;
    if remote {
        app.view.screen = Screen::Cluster;
    }
    let mut opening = real_host && collector.is_none();
    if opening {
        app.update(Action::Received(Received::Stale(Some(stale(
            started.elapsed(),
            Some(OPENING.into()),
        )))));
    }
    let mut geometry = draw(&mut tui, &mut app, &theme)?;
    let mut message = MessageClock {
        shown: None,
        since: started,
    };
    let ending = 'events: loop {
        let event = match inbox.recv_timeout(STALE_CHECK) {
            Ok(event) => event,
            Err(mpsc::RecvTimeoutError::Timeout) => Event::Tick,
            Err(mpsc::RecvTimeoutError::Disconnected) => break Ending::TerminalClosed,
        };
        let read = message.expired(&app);
        if read {
            app.update(Action::Received(Received::StatusExpired));
        }
        let actions: Vec<Action> = match event {
            Event::Tick => {
                // Nothing arrived: say so if the data has grown old, else draw nothing.
                let now = if opening {
                    Some(stale(started.elapsed(), Some(OPENING.into())))
                } else {
                    staleness(&app, collector.as_ref(), interval)
                };
                match (now == app.data.stale, read) {
                    (true, false) => continue,
                    (true, true) => Vec::new(),
                    (false, _) => vec![Action::Received(Received::Stale(now))],
                }
            }
            Event::Opened(Ok(source)) => {
                opening = false;
                collector = Some(spawn_collector(source, interval, pods_socket, snapshots.clone())?);
                vec![Action::Received(Received::Stale(None))]
            }
            Event::Opened(Err(why)) => break Ending::Failed(why),
            Event::Snapshot(snapshot) => vec![Action::Received(Received::Snapshot(snapshot))],
            Event::Fleet(fleet) => vec![Action::Received(Received::Fleet(fleet))],
            Event::Replayed(played) => {
                let mut actions = Vec::new();
                if played.rewound {
                    actions.push(Action::Received(Received::HistoryRestart));
                }
                actions.push(Action::Received(Received::ReplayStatus(played.status)));
                actions.push(Action::Received(Received::Snapshot(played.snapshot)));
                actions
            }
            Event::Terminal(TermEvent::Key(key)) if key.kind == KeyEventKind::Press => {
                keymap::decode(&app, &key).into_iter().collect()
            }
            Event::Terminal(TermEvent::Mouse(mouse)) => {
                mouse_action(&app, &geometry, mouse.kind, mouse.column, mouse.row)
                    .into_iter()
                    .collect()
            }
            Event::Terminal(TermEvent::Resize(cols, rows)) => {
                tui.resize(cols, rows)?;
                Vec::new()
            }
            Event::Terminal(_) => continue,
            Event::TerminalClosed => break Ending::TerminalClosed,
            Event::Signal(signal) => break Ending::Signal(signal),
        };
        for action in actions {
            for effect in app.update(action) {
                match effect {
                    Effect::Quit => break 'events Ending::Quit,
                    Effect::Send { signal, targets } => {
                        let outcomes = targets
                            .iter()
                            .map(|target| signal::send(target, signal).describe(signal, target))
                            .collect();
                        app.update(Action::Received(Received::SignalsSent(outcomes)));
                    }
                    Effect::ReadEnvironment { pid } => {
                        app.update(Action::Received(Received::EnvironmentRead(
                            gputop_core::host::environment(pid).map_err(|e| e.to_string()),
                        )));
                    }
                    Effect::ReadProcessTable => {
                        let table = if real_host {
                            gputop_core::host::process_table()
                        } else {
                            app.data
                                .snapshot
                                .as_deref()
                                .map(gputop_core::host::table_of)
                                .unwrap_or_default()
                        };
                        app.update(Action::Received(Received::ProcessTableRead(table)));
                    }
                    Effect::DeliverAlerts(transitions) => {
                        let problems = sink.deliver(&transitions);
                        if !problems.is_empty() {
                            app.update(Action::Received(Received::AlertDeliveryFailed(problems)));
                        }
                    }
                    Effect::Replay(command) => {
                        if let Some(replay) = &replay {
                            replay.control(command);
                        }
                    }
                    Effect::OpenNode(instance) => {
                        if let Some(FleetPoller::Prometheus(poller)) = &poller {
                            poller.open(instance);
                        }
                    }
                    Effect::Suspend => tui.suspend()?,
                    Effect::Redraw => tui.clear()?,
                }
            }
        }
        match draw(&mut tui, &mut app, &theme) {
            Ok(drawn) => geometry = drawn,
            // The terminal went away under us.
            Err(_) => break Ending::TerminalClosed,
        }
    };
    drop(tui);
    signal_handle.close();
    drop(collector);
    drop(replay);
    drop(poller);
    Ok(ending)
}

/// What the view says while NVML opens.
const OPENING: &str = "opening NVML (nvmlInit)";

/// The collector of a live view; it names the pods holding the GPUs where the kubelet's
/// PodResources socket (`pods_socket`) exists.
fn spawn_collector(
    source: Source,
    interval: Duration,
    pods_socket: &str,
    events: Sender<Event>,
) -> std::io::Result<Collector> {
    let mut host = HostCollector::new();
    let socket = std::path::Path::new(pods_socket);
    if !pods_socket.is_empty() && std::fs::symlink_metadata(socket).is_ok() {
        host.watch_pods(socket.to_path_buf())?;
    }
    Collector::spawn_with_host(
        source,
        host,
        interval,
        crate::heap::releasing(move |snapshot| events.send(Event::Snapshot(snapshot)).is_ok()),
    )
}

/// The collector of a replay: each frame goes out with where playback stands.
fn spawn_replay(
    source: Source,
    playback: Playback,
    interval: Duration,
    events: Sender<Event>,
) -> std::io::Result<Collector> {
    let mut shown: Option<usize> = None;
    Collector::spawn_with(
        source,
        interval,
        Box::new(move |snapshot| {
            let status = playback.status();
            let rewound = shown.is_some_and(|frame| status.frame < frame);
            shown = Some(status.frame);
            let played = Played {
                snapshot,
                status,
                rewound,
            };
            events.send(Event::Replayed(played)).is_ok()
        }),
    )
}

fn stale(age: Duration, waiting_on: Option<String>) -> Stale {
    Stale {
        age_seconds: age.as_secs(),
        waiting_on,
    }
}

/// The live data's age and the call it waits on, once nothing has arrived for more than
/// two intervals; `None` while it is fresh.
fn staleness(app: &App, collector: Option<&Collector>, interval: Duration) -> Option<Stale> {
    let collector = collector?;
    let taken_at = app.data.snapshot.as_ref()?.taken_at;
    let age = std::time::SystemTime::now().duration_since(taken_at).ok()?;
    (age > 2 * interval).then(|| stale(age, collector.waiting_on()))
}
