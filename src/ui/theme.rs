//! Colours and glyphs: dark (default), light, no colour (`--no-color`, `NO_COLOR`), ASCII.

use ratatui::style::{Color, Modifier, Style};

/// How the screen is painted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Theme {
    pub color: bool,
    pub ascii: bool,
    pub light: bool,
}

/// A load level, from the display thresholds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Load {
    Light,
    Moderate,
    Heavy,
}

impl Load {
    /// nvitop's rule: below `low` light, from `high` heavy.
    pub fn of(percent: f64, low: f64, high: f64) -> Self {
        if percent >= high {
            Self::Heavy
        } else if percent >= low {
            Self::Moderate
        } else {
            Self::Light
        }
    }
}

impl Theme {
    fn fg(&self, color: Color) -> Style {
        if self.color {
            Style::new().fg(color)
        } else {
            Style::new()
        }
    }

    pub fn load(&self, load: Load) -> Style {
        match load {
            Load::Light => self.fg(Color::Green),
            Load::Moderate => self.fg(if self.light {
                Color::Rgb(160, 110, 0)
            } else {
                Color::Yellow
            }),
            Load::Heavy => self.fg(Color::Red).add_modifier(Modifier::BOLD),
        }
    }

    pub fn title(&self) -> Style {
        self.fg(if self.light { Color::Blue } else { Color::Cyan })
            .add_modifier(Modifier::BOLD)
    }

    pub fn header(&self) -> Style {
        Style::new().add_modifier(Modifier::BOLD)
    }

    pub fn sorted_header(&self) -> Style {
        Style::new().add_modifier(Modifier::BOLD | Modifier::UNDERLINED)
    }

    pub fn dim(&self) -> Style {
        Style::new().add_modifier(Modifier::DIM)
    }

    pub fn selected(&self) -> Style {
        if self.color {
            Style::new()
                .fg(Color::Black)
                .bg(if self.light { Color::LightBlue } else { Color::Cyan })
        } else {
            Style::new().add_modifier(Modifier::REVERSED)
        }
    }

    pub fn tagged(&self) -> Style {
        self.fg(if self.light { Color::Magenta } else { Color::Yellow })
            .add_modifier(Modifier::BOLD)
    }

    pub fn alert(&self) -> Style {
        if self.color {
            Style::new()
                .fg(Color::White)
                .bg(Color::Red)
                .add_modifier(Modifier::BOLD)
        } else {
            Style::new().add_modifier(Modifier::BOLD | Modifier::REVERSED)
        }
    }

    /// An alert of this severity: critical as an alert, warning yellow, info cyan.
    pub fn severity(&self, severity: gputop_core::monitor::alerts::rules::Severity) -> Style {
        use gputop_core::monitor::alerts::rules::Severity;
        match severity {
            Severity::Critical => self.alert(),
            Severity::Warning => self.fg(Color::Yellow).add_modifier(Modifier::BOLD),
            Severity::Info => self.fg(Color::Cyan),
        }
    }

    pub fn error(&self) -> Style {
        self.fg(Color::Red).add_modifier(Modifier::BOLD)
    }

    pub fn ok(&self) -> Style {
        self.fg(Color::Green)
    }

    /// The marks of the sorted column, ascending and descending.
    pub fn sort_marks(&self) -> (&'static str, &'static str) {
        if self.ascii { ("^", "v") } else { ("▲", "▼") }
    }

    /// A bar `width` cells wide, filled to `percent`.
    pub fn bar(&self, percent: f64, width: usize) -> String {
        let filled = ((percent.clamp(0.0, 100.0) / 100.0) * width as f64).round() as usize;
        let (full, empty) = if self.ascii { ('#', '.') } else { ('█', '░') };
        let mut out = String::with_capacity(width * 3);
        out.extend(std::iter::repeat_n(full, filled.min(width)));
        out.extend(std::iter::repeat_n(empty, width - filled.min(width)));
        out
    }
}
