//! Key bindings: one table per screen, used both to decode keys and to draw the help screen,
//! so the help can never drift from what the keys do.

use ratatui_crossterm::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use crate::app::state::{Action, App, Signal};
use crate::app::view::{LayoutMode, Screen};
use crate::model::order::SortKey;
use crate::source::replay::PlayerCommand;

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
        Action::Quit
    })
    .hint("quit"),
    bind(
        &[Char('h'), Char('?'), Code(KeyCode::F(1))],
        "this help",
        || Action::Help,
    ).hint("help"),
    bind(
        &[Code(KeyCode::Up), Alt('k'), Code(KeyCode::BackTab)],
        "select the previous process",
        || Action::Up,
    ),
    bind(
        &[Code(KeyCode::Down), Char('j'), Alt('j'), Code(KeyCode::Tab)],
        "select the next process",
        || Action::Down,
    ),
    bind(&[Code(KeyCode::PageUp), Char('[')], "a page up", || {
        Action::PageUp
    }),
    bind(
        &[Code(KeyCode::PageDown), Char(']')],
        "a page down",
        || Action::PageDown,
    ),
    bind(&[Code(KeyCode::Home)], "the first process", || {
        Action::Home
    }),
    bind(&[Code(KeyCode::End)], "the last process", || Action::End),
    bind(
        &[Char('/')],
        "filter: words match command, user, container or PID; user:NAME container:TEXT gpu:N pid:N mem>4G sm>50 cpu>10",
        || Action::StartFilter,
    ).hint("filter"),
    bind(
        &[Char(','), Char('<')],
        "sort by the previous column",
        || Action::SortPrevious,
    ),
    bind(&[Char('.'), Char('>')], "sort by the next column", || {
        Action::SortNext
    }),
    bind(
        &[Char('o'), Code(KeyCode::F(6))],
        "then a letter, sort: g GPU-MEM, s %SM, b %GMBW, c %CPU, m %MEM, p PID, u USER, k CONTAINER, t TIME, n natural",
        || Action::SortPrefix { reverse: false },
    ).hint("sort"),
    bind(&[Char('P')], "sort by %CPU (as htop)", || Action::SortBy {
        key: SortKey::Cpu,
        reverse: false,
    }),
    bind(&[Char('M')], "sort by %MEM (as htop; htop's T is SIGTERM here: sort by TIME with o t)", || {
        Action::SortBy {
            key: SortKey::HostMemory,
            reverse: false,
        }
    }),
    bind(&[Char('O')], "then a letter, sort reversed", || {
        Action::SortPrefix { reverse: true }
    }),
    bind(&[Char(' ')], "tag or untag the process", || Action::Tag).hint("tag"),
    bind(
        &[Code(KeyCode::Esc)],
        "clear the filter, the selection and the tags",
        || Action::ClearTags,
    ),
    signal(&[Char('T'), Code(KeyCode::F(9))], "send SIGTERM (asks first)", || {
        Action::AskSignal(Signal::Terminate)
    }).hint("SIGTERM"),
    signal(
        &[Char('K'), Char('k')],
        "send SIGKILL (asks first)",
        || Action::AskSignal(Signal::Kill),
    ).hint("SIGKILL"),
    signal(&[Char('I')], "send SIGINT (asks first)", || {
        Action::AskSignal(Signal::Interrupt)
    }).hint("SIGINT"),
    bind(
        &[Code(KeyCode::Enter)],
        "process details and history",
        || Action::Details,
    ).hint("details"),
    bind(&[Char('e')], "environment of the process", || {
        Action::Environment
    }),
    bind(
        &[Char('t')],
        "tree view: GPU processes with their ancestors and children",
        || Action::Tree,
    ).hint("tree"),
    bind(
        &[Char('g')],
        "GPU history charts: utilization, memory, temperature, power",
        || Action::Charts,
    ).hint("charts"),
    bind(
        &[Char('A')],
        "alerts: active ones, the log of changes, the rules in force",
        || Action::AlertLog,
    ).hint("alerts"),
    bind(
        &[Char('u')],
        "users and containers: GPUs, memory and processes now, GPU-time since start",
        || Action::Users,
    ).hint("users"),
    bind(
        &[Code(KeyCode::Right), Alt('l')],
        "scroll the command lines right",
        || Action::ScrollCommand(Some(8)),
    ),
    bind(
        &[Code(KeyCode::Left), Alt('h')],
        "scroll the command lines left",
        || Action::ScrollCommand(Some(-8)),
    ),
    bind(
        &[Ctrl('a'), Char('^')],
        "command lines from their start",
        || Action::ScrollCommand(None),
    ),
    bind(&[Char('a')], "layout: automatic", || {
        Action::Layout(LayoutMode::Auto)
    }),
    bind(&[Char('f')], "layout: full", || {
        Action::Layout(LayoutMode::Full)
    }),
    bind(&[Char('c')], "layout: compact", || {
        Action::Layout(LayoutMode::Compact)
    }),
    bind(
        &[Char('r'), Ctrl('l'), Code(KeyCode::F(5))],
        "redraw the screen",
        || Action::Redraw,
    ),
    bind(&[Ctrl('z')], "suspend (fg resumes)", || Action::Suspend),
];

/// Every text screen (help, alerts, users, environment): scrolling down, up and sideways.
/// On the help screen any other key goes back.
pub const SCROLLING: &[Binding] = &[
    bind(&[Code(KeyCode::Down), Char('j')], "scroll down", || Action::Down),
    bind(&[Code(KeyCode::Up), Char('k')], "scroll up", || Action::Up),
    bind(&[Code(KeyCode::PageDown), Char(' ')], "a page down", || {
        Action::PageDown
    }),
    bind(&[Code(KeyCode::PageUp)], "a page up", || Action::PageUp),
    bind(&[Code(KeyCode::Home)], "the top", || Action::Home),
    bind(&[Code(KeyCode::End)], "the end", || Action::End),
    bind(
        &[Code(KeyCode::Right), Char('l')],
        "scroll right (long lines end in …)",
        || Action::ScrollCommand(Some(8)),
    ),
    bind(&[Code(KeyCode::Left)], "scroll left", || {
        Action::ScrollCommand(Some(-8))
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
    let (help, quit) = (named(Action::Help), named(Action::Quit));
    let mut room = width.saturating_sub(help.len() + GAP.len() + quit.len());
    let mut hints = vec![help];
    let middle = MAIN.iter().filter(|b| {
        !b.hint.is_empty() && (signals || !b.signal) && !is(b, &Action::Help) && !is(b, &Action::Quit)
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
        || Action::Confirm,
    ),
    bind(
        &[Code(KeyCode::Esc), Char('n'), Char('N'), Char('q')],
        "cancel",
        || Action::Cancel,
    ),
];

/// The process details screen.
pub const DETAILS: &[Binding] = &[
    bind(
        &[Code(KeyCode::Enter), Code(KeyCode::Esc), Char('q')],
        "back",
        || Action::Back,
    ),
    bind(&[Char('e')], "environment of the process", || Action::Environment),
    bind(&[Char('h'), Char('?')], "help", || Action::Help),
];

/// Replaying a recording (on the main, tree and charts screens).
pub const REPLAY: &[Binding] = &[
    bind(&[Char('p')], "pause or resume the replay", || {
        Action::Replay(PlayerCommand::TogglePause)
    }),
    bind(&[Char('{')], "replay: back 10 seconds", || {
        Action::Replay(PlayerCommand::Seek(-10.0))
    }),
    bind(&[Char('}')], "replay: forward 10 seconds", || {
        Action::Replay(PlayerCommand::Seek(10.0))
    }),
    bind(&[Char('(')], "replay: back 5 minutes", || {
        Action::Replay(PlayerCommand::Seek(-300.0))
    }),
    bind(&[Char(')')], "replay: forward 5 minutes", || {
        Action::Replay(PlayerCommand::Seek(300.0))
    }),
    bind(&[Char('s')], "replay: half the speed", || {
        Action::Replay(PlayerCommand::Speed(0.5))
    }),
    bind(&[Char('S')], "replay: double the speed", || {
        Action::Replay(PlayerCommand::Speed(2.0))
    }),
];

/// The cluster screen of the remote view.
pub const CLUSTER: &[Binding] = &[
    bind(&[Char('q'), Char('Q'), Ctrl('c')], "quit", || Action::Quit),
    bind(&[Code(KeyCode::Up), Alt('k')], "the previous node", || Action::Up),
    bind(&[Code(KeyCode::Down), Char('j')], "the next node", || {
        Action::Down
    }),
    bind(
        &[Code(KeyCode::Enter)],
        "open the node: its GPUs and processes (Esc or Backspace: back here)",
        || Action::Details,
    ),
    bind(&[Char('h'), Char('?')], "help", || Action::Help),
];

/// The charts screen.
pub const CHARTS: &[Binding] = &[
    bind(&[Char('g'), Code(KeyCode::Esc), Char('q')], "back", || {
        Action::Back
    }),
    bind(
        &[
            Code(KeyCode::Down),
            Code(KeyCode::Right),
            Char('j'),
            Code(KeyCode::Tab),
        ],
        "the next GPU",
        || Action::ChartDevice(1),
    ),
    bind(
        &[Code(KeyCode::Up), Code(KeyCode::Left), Code(KeyCode::BackTab)],
        "the previous GPU",
        || Action::ChartDevice(-1),
    ),
    bind(&[Char('w')], "time span: 10 min, 1 h, 6 h, 24 h", || {
        Action::ChartSpan
    }),
    bind(&[Char('A')], "alerts", || Action::AlertLog),
    bind(&[Char('h'), Char('?')], "help", || Action::Help),
];

/// The alerts screen (it scrolls as every text screen does).
pub const ALERTS: &[Binding] = &[
    bind(&[Char('A'), Code(KeyCode::Esc), Char('q')], "back", || {
        Action::Back
    }),
    bind(&[Char('h'), Char('?')], "help", || Action::Help),
];

/// The users and containers screen (it scrolls as every text screen does).
pub const USERS: &[Binding] = &[
    bind(&[Char('u'), Code(KeyCode::Esc), Char('q')], "back", || {
        Action::Users
    }),
    bind(&[Char('h'), Char('?')], "help", || Action::Help),
];

/// The environment screen (it scrolls as every text screen does).
pub const ENVIRONMENT: &[Binding] = &[
    bind(&[Char('e'), Code(KeyCode::Esc), Char('q')], "back", || {
        Action::Back
    }),
    bind(&[Char('h'), Char('?')], "help", || Action::Help),
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
            KeyCode::Esc => Some(Action::FilterClear),
            KeyCode::Enter => Some(Action::FilterAccept),
            KeyCode::Backspace => Some(Action::FilterBackspace),
            KeyCode::Char(c) if !event.modifiers.contains(KeyModifiers::CONTROL) => {
                Some(Action::FilterInput(c))
            }
            _ => None,
        };
    }
    if let Some(reverse) = app.view.sort_prefix {
        return match event.code {
            KeyCode::Char(c) => {
                Some(SortKey::from_letter(c).map_or(Action::Cancel, |key| Action::SortBy { key, reverse }))
            }
            _ => Some(Action::Cancel),
        };
    }
    match app.view.screen {
        Screen::Help => Some(lookup(SCROLLING, event).unwrap_or(Action::Back)),
        Screen::Details => lookup(DETAILS, event),
        Screen::Environment => lookup(ENVIRONMENT, event).or_else(|| lookup(SCROLLING, event)),
        Screen::Charts => replay_key(app, event).or_else(|| lookup(CHARTS, event)),
        Screen::Alerts => lookup(ALERTS, event).or_else(|| lookup(SCROLLING, event)),
        Screen::Users => lookup(USERS, event).or_else(|| lookup(SCROLLING, event)),
        Screen::Cluster => lookup(CLUSTER, event),
        Screen::Main | Screen::Tree => {
            if event.code == KeyCode::Esc && !app.view.filter.is_empty() {
                return Some(Action::FilterClear);
            }
            // In the remote view, Esc (with nothing to clear) and Backspace lead back to the
            // cluster.
            let nothing_to_clear = app.view.tagged.is_empty() && app.view.selected.is_none();
            if app.data.cluster.is_some()
                && (event.code == KeyCode::Backspace || (event.code == KeyCode::Esc && nothing_to_clear))
            {
                return Some(Action::Back);
            }
            replay_key(app, event).or_else(|| lookup(MAIN, event))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::app::filter::Selection;
    use crate::config::Settings;

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    #[test]
    fn keys_decode_by_mode_and_readonly_answers_signal_keys_with_a_word() {
        let mut app = App::new(Settings::default(), Selection::default(), false, None);
        assert_eq!(
            decode(&app, &key(KeyCode::Char('K'))),
            Some(Action::AskSignal(Signal::Kill))
        );
        assert_eq!(
            decode(&app, &key(KeyCode::Char('o'))),
            Some(Action::SortPrefix { reverse: false })
        );
        app.view.sort_prefix = Some(true);
        assert_eq!(
            decode(&app, &key(KeyCode::Char('g'))),
            Some(Action::SortBy {
                key: SortKey::GpuMemory,
                reverse: true
            })
        );
        app.view.sort_prefix = None;
        app.view.filter_editing = true;
        assert_eq!(
            decode(&app, &key(KeyCode::Char('K'))),
            Some(Action::FilterInput('K'))
        );
        app.view.filter_editing = false;
        let mut readonly = App::new(Settings::default(), Selection::default(), true, None);
        let asked = decode(&readonly, &key(KeyCode::Char('K')));
        assert_eq!(asked, Some(Action::AskSignal(Signal::Kill)));
        assert_eq!(readonly.update(asked.unwrap()), Vec::new());
        assert_eq!(
            readonly.view.status.as_deref(),
            Some("Read-only: signals are disabled")
        );
        assert!(readonly.view.confirmation.is_none());
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(decode(&app, &ctrl_c), Some(Action::Quit));
        assert_eq!(
            decode(&app, &key(KeyCode::Char('c'))),
            Some(Action::Layout(LayoutMode::Compact))
        );
    }

    #[test]
    fn htop_keys_work_where_they_do_not_clash() {
        let app = App::new(Settings::default(), Selection::default(), false, None);
        let sort = |key| Some(Action::SortBy { key, reverse: false });
        for (code, action) in [
            (KeyCode::F(1), Some(Action::Help)),
            (KeyCode::F(6), Some(Action::SortPrefix { reverse: false })),
            (KeyCode::F(9), Some(Action::AskSignal(Signal::Terminate))),
            (KeyCode::F(10), Some(Action::Quit)),
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
                (KeyCode::Home, Action::Home),
                (KeyCode::End, Action::End),
                (KeyCode::PageDown, Action::PageDown),
                (KeyCode::Right, Action::ScrollCommand(Some(8))),
            ] {
                assert_eq!(decode(&app, &key(code)), Some(action), "{screen:?} {code:?}");
            }
        }
        app.view.screen = Screen::Help;
        assert_eq!(decode(&app, &key(KeyCode::Char('x'))), Some(Action::Back));
    }
}
