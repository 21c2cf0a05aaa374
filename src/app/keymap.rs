//! Key bindings: one table per screen, used both to decode keys and to draw the help screen,
//! so the help can never drift from what the keys do.

use ratatui_crossterm::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use crate::app::state::{Action, App, Arrange, Go, Move, Signal, Signalling};
use crate::app::view::{LayoutMode, Screen};
use gputop_core::model::order::SortKey;
use gputop_core::source::replay::PlayerCommand;

/// A key as the tables name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Char(char),
    Ctrl(char),
    Alt(char),
    Code(KeyCode),
}

impl Key {
    fn matches(self, event: &KeyEvent) -> bool {
        let ctrl = event.modifiers.contains(KeyModifiers::CONTROL);
        let alt = event.modifiers.contains(KeyModifiers::ALT);
        match (self, event.code) {
            (Self::Char(c), KeyCode::Char(e)) => !ctrl && !alt && c == e,
            (Self::Ctrl(c), KeyCode::Char(e)) => ctrl && c == e.to_ascii_lowercase(),
            (Self::Alt(c), KeyCode::Char(e)) => alt && !ctrl && c == e,
            (Self::Code(c), code) => !ctrl && c == code,
            _ => false,
        }
    }
}

/// One row of a key table.
#[derive(Debug, Clone, Copy)]
pub struct Binding {
    pub keys: &'static [Key],
    pub help: &'static str,
    /// The word the footer shows for it; empty for none.
    pub hint: &'static str,
    pub action: fn() -> Action,
    /// Sends signals: absent in read-only mode.
    pub signal: bool,
}

impl Binding {
    /// Every key bound, as the help screen shows them: `Down j Alt-j Tab`.
    pub fn label(&self) -> String {
        let names: Vec<String> = self.keys.iter().map(|k| k.name()).collect();
        names.join(" ")
    }

    /// The binding, shown in the footer as its first key and `hint`.
    const fn hint(self, hint: &'static str) -> Self {
        Self { hint, ..self }
    }
}

impl Key {
    /// How help and the footer name the key.
    pub fn name(self) -> String {
        match self {
            Self::Char(' ') => "Space".into(),
            Self::Char(c) => c.to_string(),
            Self::Ctrl(c) => format!("Ctrl-{}", c.to_ascii_uppercase()),
            Self::Alt(c) => format!("Alt-{c}"),
            Self::Code(code) => match code {
                KeyCode::PageUp => "PgUp".into(),
                KeyCode::PageDown => "PgDn".into(),
                KeyCode::BackTab => "Shift-Tab".into(),
                KeyCode::F(n) => format!("F{n}"),
                other => format!("{other:?}"),
            },
        }
    }
}

const fn bind(keys: &'static [Key], help: &'static str, action: fn() -> Action) -> Binding {
    Binding {
        keys,
        help,
        hint: "",
        action,
        signal: false,
    }
}

const fn signal(keys: &'static [Key], help: &'static str, action: fn() -> Action) -> Binding {
    Binding {
        signal: true,
        ..bind(keys, help, action)
    }
}

use Key::{Alt, Char, Code, Ctrl};

/// The main screen and the tree view.
pub const MAIN: &[Binding] = &[
    bind(&[Char('q'), Char('Q'), Ctrl('c'), Code(KeyCode::F(10))], "quit", || {
        Action::Go(Go::Quit)
    })
    .hint("quit"),
    bind(
        &[Char('h'), Char('?'), Code(KeyCode::F(1))],
        "this help",
        || Action::Go(Go::Help),
    ).hint("help"),
    bind(
        &[Code(KeyCode::Up), Alt('k'), Code(KeyCode::BackTab)],
        "select the previous process",
        || Action::Move(Move::Up),
    ),
    bind(
        &[Code(KeyCode::Down), Char('j'), Alt('j'), Code(KeyCode::Tab)],
        "select the next process",
        || Action::Move(Move::Down),
    ),
    bind(&[Code(KeyCode::PageUp), Char('[')], "a page up", || {
        Action::Move(Move::PageUp)
    }),
    bind(
        &[Code(KeyCode::PageDown), Char(']')],
        "a page down",
        || Action::Move(Move::PageDown),
    ),
    bind(&[Code(KeyCode::Home)], "the first process", || {
        Action::Move(Move::Home)
    }),
    bind(&[Code(KeyCode::End)], "the last process", || Action::Move(Move::End)),
    bind(
        &[Char('/')],
        "filter: words match command, user, container or PID; user:NAME container:TEXT gpu:N pid:N mem>4G sm>50 cpu>10",
        || Action::Arrange(Arrange::StartFilter),
    ).hint("filter"),
    bind(
        &[Char(','), Char('<')],
        "sort by the previous column",
        || Action::Arrange(Arrange::SortPrevious),
    ),
    bind(&[Char('.'), Char('>')], "sort by the next column", || {
        Action::Arrange(Arrange::SortNext)
    }),
    bind(
        &[Char('o'), Code(KeyCode::F(6))],
        "then a letter, sort: g GPU-MEM, s %SM, b %GMBW, c %CPU, m %MEM, p PID, u USER, k CONTAINER, t TIME, n natural",
        || Action::Arrange(Arrange::SortPrefix { reverse: false }),
    ).hint("sort"),
    bind(&[Char('P')], "sort by %CPU (as htop)", || Action::Arrange(Arrange::SortBy {
        key: SortKey::Cpu,
        reverse: false,
    })),
    bind(&[Char('M')], "sort by %MEM (as htop; htop's T is SIGTERM here: sort by TIME with o t)", || {
        Action::Arrange(Arrange::SortBy {
            key: SortKey::HostMemory,
            reverse: false,
        })
    }),
    bind(&[Char('O')], "then a letter, sort reversed", || {
        Action::Arrange(Arrange::SortPrefix { reverse: true })
    }),
    bind(&[Char(' ')], "tag or untag the process", || Action::Signalling(Signalling::Tag)).hint("tag"),
    bind(
        &[Code(KeyCode::Esc)],
        "clear the filter, the selection and the tags",
        || Action::Signalling(Signalling::ClearTags),
    ),
    signal(&[Char('T'), Code(KeyCode::F(9))], "send SIGTERM (asks first)", || {
        Action::Signalling(Signalling::AskSignal(Signal::Terminate))
    }).hint("SIGTERM"),
    signal(
        &[Char('K'), Char('k')],
        "send SIGKILL (asks first)",
        || Action::Signalling(Signalling::AskSignal(Signal::Kill)),
    ).hint("SIGKILL"),
    signal(&[Char('I')], "send SIGINT (asks first)", || {
        Action::Signalling(Signalling::AskSignal(Signal::Interrupt))
    }).hint("SIGINT"),
    bind(
        &[Code(KeyCode::Enter)],
        "process details and history",
        || Action::Go(Go::Details),
    ).hint("details"),
    bind(&[Char('e')], "environment of the process", || {
        Action::Go(Go::Environment)
    }),
    bind(
        &[Char('t')],
        "tree view: GPU processes with their ancestors and children",
        || Action::Go(Go::Tree),
    ).hint("tree"),
    bind(
        &[Char('g')],
        "GPU history charts: utilization, memory, temperature, power",
        || Action::Go(Go::Charts),
    ).hint("charts"),
    bind(
        &[Char('A')],
        "alerts: active ones, the log of changes, the rules in force",
        || Action::Go(Go::AlertLog),
    ).hint("alerts"),
    bind(
        &[Char('u')],
        "users and containers: GPUs, memory and processes now, GPU-time since start",
        || Action::Go(Go::Users),
    ).hint("users"),
    bind(
        &[Code(KeyCode::Right), Alt('l')],
        "scroll the command lines right",
        || Action::Move(Move::ScrollCommand(Some(8))),
    ),
    bind(
        &[Code(KeyCode::Left), Alt('h')],
        "scroll the command lines left",
        || Action::Move(Move::ScrollCommand(Some(-8))),
    ),
    bind(
        &[Ctrl('a'), Char('^')],
        "command lines from their start",
        || Action::Move(Move::ScrollCommand(None)),
    ),
    bind(&[Char('a')], "layout: automatic", || {
        Action::Go(Go::Layout(LayoutMode::Auto))
    }),
    bind(&[Char('f')], "layout: full", || {
        Action::Go(Go::Layout(LayoutMode::Full))
    }),
    bind(&[Char('c')], "layout: compact", || {
        Action::Go(Go::Layout(LayoutMode::Compact))
    }),
    bind(
        &[Char('r'), Ctrl('l'), Code(KeyCode::F(5))],
        "redraw the screen",
        || Action::Go(Go::Redraw),
    ),
    bind(&[Ctrl('z')], "suspend (fg resumes)", || Action::Go(Go::Suspend)),
];

/// Every text screen (help, alerts, users, environment): scrolling down, up and sideways.
/// On the help screen any other key goes back.
pub const SCROLLING: &[Binding] = &[
    bind(&[Code(KeyCode::Down), Char('j')], "scroll down", || {
        Action::Move(Move::Down)
    }),
    bind(&[Code(KeyCode::Up), Char('k')], "scroll up", || {
        Action::Move(Move::Up)
    }),
    bind(&[Code(KeyCode::PageDown), Char(' ')], "a page down", || {
        Action::Move(Move::PageDown)
    }),
    bind(&[Code(KeyCode::PageUp)], "a page up", || {
        Action::Move(Move::PageUp)
    }),
    bind(&[Code(KeyCode::Home)], "the top", || Action::Move(Move::Home)),
    bind(&[Code(KeyCode::End)], "the end", || Action::Move(Move::End)),
    bind(
        &[Code(KeyCode::Right), Char('l')],
        "scroll right (long lines end in …)",
        || Action::Move(Move::ScrollCommand(Some(8))),
    ),
    bind(&[Code(KeyCode::Left)], "scroll left", || {
        Action::Move(Move::ScrollCommand(Some(-8)))
    }),
];

/// The footer's hints on the main screen in at most `width` columns: the first key and hint
/// of each binding that has one, in the table's order as far as they fit, always with help
/// first and quit last (as top and htop show it); signals left out where they are off.
pub fn footer_hints(signals: bool, width: usize) -> String {
    const GAP: &str = "  ";
    let hint = |b: &Binding| format!("{} {}", b.keys[0].name(), b.hint);
    let is = |b: &Binding, action: &Action| (b.action)() == *action;
    let named = |action: Action| MAIN.iter().find(|b| is(b, &action)).map(hint).unwrap_or_default();
    let (help, quit) = (named(Action::Go(Go::Help)), named(Action::Go(Go::Quit)));
    let mut room = width.saturating_sub(help.len() + GAP.len() + quit.len());
    let mut hints = vec![help];
    let middle = MAIN.iter().filter(|b| {
        !b.hint.is_empty()
            && (signals || !b.signal)
            && !is(b, &Action::Go(Go::Help))
            && !is(b, &Action::Go(Go::Quit))
    });
    for binding in middle {
        let text = hint(binding);
        if text.len() + GAP.len() <= room {
            room -= text.len() + GAP.len();
            hints.push(text);
        }
    }
    hints.push(quit);
    hints.join(GAP)
}

/// What the footer shows after `o` or `O`, in at most `width` columns: the letters and the
/// columns they sort by, the most used first.
pub fn sort_prompt(reverse: bool, width: usize) -> String {
    use SortKey::*;
    let order = [
        GpuMemory,
        Sm,
        Cpu,
        HostMemory,
        Time,
        Pid,
        User,
        MemoryBandwidth,
        Container,
        Natural,
    ];
    let mut text = format!("Sort{}:", if reverse { " reversed" } else { "" });
    for key in order {
        let item = format!(" {} {}", key.letter(), key.name());
        if text.len() + item.len() > width {
            break;
        }
        text.push_str(&item);
    }
    if text.len() + " (Esc)".len() <= width {
        text.push_str(" (Esc)");
    }
    text
}

/// The main screen's keys, a line each (`--help` ends with them, the man page lists them).
pub fn summary() -> String {
    MAIN.iter()
        .map(|b| format!("  {:<20} {}\n", b.label(), b.help))
        .collect()
}

/// A signal confirmation.
pub const DIALOG: &[Binding] = &[
    bind(
        &[Code(KeyCode::Enter), Char('y'), Char('Y')],
        "send the signal to the listed processes",
        || Action::Signalling(Signalling::Confirm),
    ),
    bind(
        &[Code(KeyCode::Esc), Char('n'), Char('N'), Char('q')],
        "cancel",
        || Action::Signalling(Signalling::Cancel),
    ),
];

/// The process details screen.
pub const DETAILS: &[Binding] = &[
    bind(
        &[Code(KeyCode::Enter), Code(KeyCode::Esc), Char('q')],
        "back",
        || Action::Go(Go::Back),
    ),
    bind(&[Char('e')], "environment of the process", || {
        Action::Go(Go::Environment)
    }),
    bind(&[Char('h'), Char('?')], "help", || Action::Go(Go::Help)),
];

/// Replaying a recording (on the main, tree and charts screens).
pub const REPLAY: &[Binding] = &[
    bind(&[Char('p')], "pause or resume the replay", || {
        Action::Go(Go::Replay(PlayerCommand::TogglePause))
    }),
    bind(&[Char('{')], "replay: back 10 seconds", || {
        Action::Go(Go::Replay(PlayerCommand::Seek(-10.0)))
    }),
    bind(&[Char('}')], "replay: forward 10 seconds", || {
        Action::Go(Go::Replay(PlayerCommand::Seek(10.0)))
    }),
    bind(&[Char('(')], "replay: back 5 minutes", || {
        Action::Go(Go::Replay(PlayerCommand::Seek(-300.0)))
    }),
    bind(&[Char(')')], "replay: forward 5 minutes", || {
        Action::Go(Go::Replay(PlayerCommand::Seek(300.0)))
    }),
    bind(&[Char('s')], "replay: half the speed", || {
        Action::Go(Go::Replay(PlayerCommand::Speed(0.5)))
    }),
    bind(&[Char('S')], "replay: double the speed", || {
        Action::Go(Go::Replay(PlayerCommand::Speed(2.0)))
    }),
];

/// The cluster screen of the fleet view.
pub const CLUSTER: &[Binding] = &[
    bind(&[Char('q'), Char('Q'), Ctrl('c')], "quit", || {
        Action::Go(Go::Quit)
    })
    .hint("quit"),
    bind(
        &[Code(KeyCode::Up), Char('k'), Alt('k')],
        "the previous node",
        || Action::Move(Move::Up),
    ),
    bind(
        &[Code(KeyCode::Down), Char('j'), Alt('j')],
        "the next node",
        || Action::Move(Move::Down),
    ),
    bind(&[Code(KeyCode::PageUp), Char('[')], "a page up", || {
        Action::Move(Move::PageUp)
    }),
    bind(&[Code(KeyCode::PageDown), Char(']')], "a page down", || {
        Action::Move(Move::PageDown)
    }),
    bind(&[Code(KeyCode::Home)], "the first node", || {
        Action::Move(Move::Home)
    }),
    bind(&[Code(KeyCode::End)], "the last node", || Action::Move(Move::End)),
    bind(
        &[Code(KeyCode::Enter)],
        "open the node: its GPUs and processes (Esc or Backspace: back here)",
        || Action::Go(Go::Details),
    )
    .hint("open"),
    bind(
        &[Char('.'), Char('>')],
        "sort the nodes by the next column",
        || Action::Arrange(Arrange::SortNext),
    )
    .hint("sort"),
    bind(
        &[Char(','), Char('<')],
        "sort the nodes by the previous column",
        || Action::Arrange(Arrange::SortPrevious),
    ),
    bind(&[Char('I')], "invert the order", || {
        Action::Arrange(Arrange::Invert)
    }),
    bind(
        &[Char('/')],
        "filter nodes: words match the name or a label's value; KEY=VALUE a label, user=NAME a user",
        || Action::Arrange(Arrange::StartFilter),
    )
    .hint("filter"),
    bind(&[Code(KeyCode::Esc)], "clear the filter", || {
        Action::Arrange(Arrange::FilterClear)
    }),
    bind(&[Char('h'), Char('?'), Code(KeyCode::F(1))], "help", || {
        Action::Go(Go::Help)
    })
    .hint("help"),
];

/// The charts screen.
pub const CHARTS: &[Binding] = &[
    bind(&[Char('g'), Code(KeyCode::Esc), Char('q')], "back", || {
        Action::Go(Go::Back)
    }),
    bind(
        &[
            Code(KeyCode::Down),
            Code(KeyCode::Right),
            Char('j'),
            Code(KeyCode::Tab),
        ],
        "the next GPU",
        || Action::Go(Go::ChartDevice(1)),
    ),
    bind(
        &[Code(KeyCode::Up), Code(KeyCode::Left), Code(KeyCode::BackTab)],
        "the previous GPU",
        || Action::Go(Go::ChartDevice(-1)),
    ),
    bind(&[Char('w')], "time span: 10 min, 1 h, 6 h, 24 h", || {
        Action::Go(Go::ChartSpan)
    }),
    bind(&[Char('A')], "alerts", || Action::Go(Go::AlertLog)),
    bind(&[Char('h'), Char('?')], "help", || Action::Go(Go::Help)),
];

/// The alerts screen (it scrolls as every text screen does).
pub const ALERTS: &[Binding] = &[
    bind(&[Char('A'), Code(KeyCode::Esc), Char('q')], "back", || {
        Action::Go(Go::Back)
    }),
    bind(&[Char('h'), Char('?')], "help", || Action::Go(Go::Help)),
];

/// The users and containers screen (it scrolls as every text screen does).
pub const USERS: &[Binding] = &[
    bind(&[Char('u'), Code(KeyCode::Esc), Char('q')], "back", || {
        Action::Go(Go::Users)
    }),
    bind(&[Char('h'), Char('?')], "help", || Action::Go(Go::Help)),
];

/// The environment screen (it scrolls as every text screen does).
pub const ENVIRONMENT: &[Binding] = &[
    bind(&[Char('e'), Code(KeyCode::Esc), Char('q')], "back", || {
        Action::Go(Go::Back)
    }),
    bind(&[Char('h'), Char('?')], "help", || Action::Go(Go::Help)),
];

/// The action of `event` in `table`. Signal keys decode in read-only mode too: the update
/// answers them with a word on the status line instead of a dialog.
fn lookup(table: &[Binding], event: &KeyEvent) -> Option<Action> {
    table
        .iter()
        .find(|b| b.keys.iter().any(|k| k.matches(event)))
        .map(|b| (b.action)())
}

fn replay_key(app: &App, event: &KeyEvent) -> Option<Action> {
    app.data.replay.and_then(|_| lookup(REPLAY, event))
}

/// The action a key means in the app's current state.
pub fn decode(app: &App, event: &KeyEvent) -> Option<Action> {
    if app.view.confirmation.is_some() {
        return lookup(DIALOG, event);
    }
    if app.view.filter_editing {
        return match event.code {
            KeyCode::Esc => Some(Action::Arrange(Arrange::FilterClear)),
            KeyCode::Enter => Some(Action::Arrange(Arrange::FilterAccept)),
            KeyCode::Backspace => Some(Action::Arrange(Arrange::FilterBackspace)),
            KeyCode::Char(c) if !event.modifiers.contains(KeyModifiers::CONTROL) => {
                Some(Action::Arrange(Arrange::FilterInput(c)))
            }
            _ => None,
        };
    }
    if let Some(reverse) = app.view.sort_prefix {
        return match event.code {
            KeyCode::Char(c) => Some(
                SortKey::from_letter(c).map_or(Action::Signalling(Signalling::Cancel), |key| {
                    Action::Arrange(Arrange::SortBy { key, reverse })
                }),
            ),
            _ => Some(Action::Signalling(Signalling::Cancel)),
        };
    }
    match app.view.screen {
        Screen::Help => Some(lookup(SCROLLING, event).unwrap_or(Action::Go(Go::Back))),
        Screen::Details => lookup(DETAILS, event),
        Screen::Environment => lookup(ENVIRONMENT, event).or_else(|| lookup(SCROLLING, event)),
        Screen::Charts => replay_key(app, event).or_else(|| lookup(CHARTS, event)),
        Screen::Alerts => lookup(ALERTS, event).or_else(|| lookup(SCROLLING, event)),
        Screen::Users => lookup(USERS, event).or_else(|| lookup(SCROLLING, event)),
        Screen::Cluster => lookup(CLUSTER, event),
        Screen::Main | Screen::Tree => {
            if event.code == KeyCode::Esc && !app.view.filter.is_empty() {
                return Some(Action::Arrange(Arrange::FilterClear));
            }
            // In the remote view, Esc (with nothing to clear) and Backspace lead back to the
            // cluster.
            let nothing_to_clear = app.view.tagged.is_empty() && app.view.selected.is_none();
            if app.data.fleet.is_some()
                && (event.code == KeyCode::Backspace || (event.code == KeyCode::Esc && nothing_to_clear))
            {
                return Some(Action::Go(Go::Back));
            }
            replay_key(app, event).or_else(|| lookup(MAIN, event))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::filter::Selection;
    use gputop_core::config::Settings;

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    #[test]
    fn keys_decode_by_mode_and_readonly_answers_signal_keys_with_a_word() {
        let mut app = App::new(Settings::default(), Selection::default(), false, None);
        assert_eq!(
            decode(&app, &key(KeyCode::Char('K'))),
            Some(Action::Signalling(Signalling::AskSignal(Signal::Kill)))
        );
        assert_eq!(
            decode(&app, &key(KeyCode::Char('o'))),
            Some(Action::Arrange(Arrange::SortPrefix { reverse: false }))
        );
        app.view.sort_prefix = Some(true);
        assert_eq!(
            decode(&app, &key(KeyCode::Char('g'))),
            Some(Action::Arrange(Arrange::SortBy {
                key: SortKey::GpuMemory,
                reverse: true
            }))
        );
        app.view.sort_prefix = None;
        app.view.filter_editing = true;
        assert_eq!(
            decode(&app, &key(KeyCode::Char('K'))),
            Some(Action::Arrange(Arrange::FilterInput('K')))
        );
        app.view.filter_editing = false;
        let mut readonly = App::new(Settings::default(), Selection::default(), true, None);
        let asked = decode(&readonly, &key(KeyCode::Char('K')));
        assert_eq!(
            asked,
            Some(Action::Signalling(Signalling::AskSignal(Signal::Kill)))
        );
        assert_eq!(readonly.update(asked.unwrap()), Vec::new());
        assert_eq!(
            readonly.view.status.as_deref(),
            Some("Read-only: signals are disabled")
        );
        assert!(readonly.view.confirmation.is_none());
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(decode(&app, &ctrl_c), Some(Action::Go(Go::Quit)));
        assert_eq!(
            decode(&app, &key(KeyCode::Char('c'))),
            Some(Action::Go(Go::Layout(LayoutMode::Compact)))
        );
    }

    #[test]
    fn htop_keys_work_where_they_do_not_clash() {
        let app = App::new(Settings::default(), Selection::default(), false, None);
        let sort = |key| Some(Action::Arrange(Arrange::SortBy { key, reverse: false }));
        for (code, action) in [
            (KeyCode::F(1), Some(Action::Go(Go::Help))),
            (
                KeyCode::F(6),
                Some(Action::Arrange(Arrange::SortPrefix { reverse: false })),
            ),
            (
                KeyCode::F(9),
                Some(Action::Signalling(Signalling::AskSignal(Signal::Terminate))),
            ),
            (KeyCode::F(10), Some(Action::Go(Go::Quit))),
            (KeyCode::Char('P'), sort(SortKey::Cpu)),
            (KeyCode::Char('M'), sort(SortKey::HostMemory)),
        ] {
            assert_eq!(decode(&app, &key(code)), action, "{code:?}");
        }
    }

    #[test]
    fn no_key_is_bound_twice_in_a_table() {
        for table in [
            MAIN,
            SCROLLING,
            DIALOG,
            DETAILS,
            ENVIRONMENT,
            CHARTS,
            ALERTS,
            REPLAY,
            CLUSTER,
        ] {
            let keys: Vec<Key> = table.iter().flat_map(|b| b.keys.iter().copied()).collect();
            for (i, k) in keys.iter().enumerate() {
                assert!(!keys[i + 1..].contains(k), "{k:?} is bound twice");
            }
        }
        // A text screen's own keys come first, then the shared scrolling ones: none hides one.
        for table in [ALERTS, USERS, ENVIRONMENT] {
            for own in table.iter().flat_map(|b| b.keys) {
                assert!(
                    !SCROLLING.iter().any(|b| b.keys.contains(own)),
                    "{own:?} is bound on a text screen and for scrolling"
                );
            }
        }
    }

    #[test]
    fn text_screens_scroll_with_the_same_keys_and_help_goes_back_on_any_other() {
        let mut app = App::new(Settings::default(), Selection::default(), false, None);
        for screen in [Screen::Help, Screen::Alerts, Screen::Users, Screen::Environment] {
            app.view.screen = screen;
            for (code, action) in [
                (KeyCode::Home, Action::Move(Move::Home)),
                (KeyCode::End, Action::Move(Move::End)),
                (KeyCode::PageDown, Action::Move(Move::PageDown)),
                (KeyCode::Right, Action::Move(Move::ScrollCommand(Some(8)))),
            ] {
                assert_eq!(decode(&app, &key(code)), Some(action), "{screen:?} {code:?}");
            }
        }
        app.view.screen = Screen::Help;
        assert_eq!(decode(&app, &key(KeyCode::Char('x'))), Some(Action::Go(Go::Back)));
    }
}
