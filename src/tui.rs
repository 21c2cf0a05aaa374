//! The terminal: raw mode, alternate screen, mouse; restored on every way out (drop, panic,
//! the signals the event loop turns into a quit) and around Ctrl-Z.

use std::io::{self, Write};
use std::sync::Once;

use ratatui::backend::Backend;
use ratatui::buffer::{Buffer, Cell, CellDiffOption, CellWidth};
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier};
use ratatui_crossterm::CrosstermBackend;
use ratatui_crossterm::crossterm::event::{DisableMouseCapture, EnableMouseCapture};
use ratatui_crossterm::crossterm::terminal::{
    BeginSynchronizedUpdate, Clear, ClearType, EndSynchronizedUpdate, EnterAlternateScreen,
    LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};
use ratatui_crossterm::crossterm::{cursor, execute, queue};

/// Leaves raw mode and the alternate screen; safe to call more than once.
pub fn restore() {
    // Raw mode first: the rest are plain writes.
    let _ = disable_raw_mode();
    let _ = execute!(
        io::stdout(),
        DisableMouseCapture,
        LeaveAlternateScreen,
        cursor::Show
    );
}

fn install_panic_hook() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
    });
}

/// The interactive terminal: what it shows, and the frame being drawn. Restores the
/// terminal when dropped.
///
/// Frames are compared and written here rather than by ratatui's `Terminal`, which wrote
/// each frame in several pieces (each one waking the reader: sshd, the terminal emulator),
/// wrote the synchronized-update markers even when nothing had changed, and opened
/// /dev/tty every frame to ask the size. A frame here is one write, an unchanged frame
/// writes nothing, and the size is asked of stdout.
pub struct Tui {
    /// Turns changed cells into escape sequences, gathered until flushed.
    output: CrosstermBackend<Gathered>,
    /// What the terminal shows: the last frame written.
    shown: Buffer,
    /// The frame being drawn.
    next: Buffer,
}

/// Bytes for the terminal, gathered until flushed and then written in one write.
struct Gathered(Vec<u8>);

impl Write for Gathered {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.0.is_empty() {
            return Ok(());
        }
        let mut stdout = io::stdout().lock();
        let written = stdout.write_all(&self.0).and_then(|()| stdout.flush());
        self.0.clear();
        written
    }
}

impl std::fmt::Debug for Tui {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tui")
    }
}

fn enter() -> io::Result<()> {
    enable_raw_mode()?;
    execute!(
        io::stdout(),
        EnterAlternateScreen,
        EnableMouseCapture,
        cursor::Hide
    )
}

/// The terminal's size, asked of stdout (no file opened, unlike crossterm's `size`).
fn window_area() -> io::Result<Rect> {
    // SAFETY: TIOCGWINSZ fills the winsize it is given and reads nothing else.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    if unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Rect::new(0, 0, size.ws_col, size.ws_row))
}

impl Tui {
    pub fn enter() -> io::Result<Self> {
        install_panic_hook();
        if let Err(e) = enter() {
            restore();
            return Err(e);
        }
        let area = window_area()?;
        Ok(Self {
            output: CrosstermBackend::new(Gathered(Vec::new())),
            shown: Buffer::empty(area),
            next: Buffer::empty(area),
        })
    }

    /// Draws one frame and writes what changed since the last, inside a synchronized
    /// update so the terminal shows it whole.
    pub fn draw<R>(&mut self, render: impl FnOnce(&mut Buffer) -> R) -> io::Result<R> {
        let area = window_area()?;
        if area != self.shown.area {
            self.shown = Buffer::empty(area);
            self.next = Buffer::empty(area);
            queue!(self.output, Clear(ClearType::All))?;
        }
        let result = render(&mut self.next);
        let mut changes = changes(&self.shown, &self.next).peekable();
        if changes.peek().is_some() {
            queue!(self.output, BeginSynchronizedUpdate)?;
            self.output.draw(changes)?;
            queue!(self.output, EndSynchronizedUpdate)?;
        }
        std::mem::swap(&mut self.shown, &mut self.next);
        // Blank for the next frame now, while the cells are still in the cache.
        self.next.reset();
        Write::flush(&mut self.output)?;
        Ok(result)
    }

    /// Ctrl-Z: give the terminal back, stop until `fg`, then take it again and redraw all.
    pub fn suspend(&mut self) -> io::Result<()> {
        restore();
        // SIGSTOP, not SIGTSTP: the kernel discards SIGTSTP for an orphaned process group
        // (gputop started without a job-control shell), while SIGSTOP always stops.
        // SAFETY: raising a signal at ourselves.
        unsafe { libc::raise(libc::SIGSTOP) };
        enter()?;
        self.clear()
    }

    /// Clears the screen and forgets what was drawn, so the next frame is drawn whole.
    pub fn clear(&mut self) -> io::Result<()> {
        queue!(self.output, Clear(ClearType::All))?;
        self.shown = Buffer::empty(self.shown.area);
        Write::flush(&mut self.output)
    }
}

impl Drop for Tui {
    fn drop(&mut self) {
        restore();
    }
}

/// Modifiers that show on a blank cell: a wide character with one of them (or with a
/// background) leaves it on its trailing columns until those are written again.
const SHOWS_ON_BLANK: Modifier = Modifier::REVERSED
    .union(Modifier::UNDERLINED)
    .union(Modifier::SLOW_BLINK)
    .union(Modifier::RAPID_BLINK)
    .union(Modifier::CROSSED_OUT);

/// The cells of `next` to write over `shown`, with their positions: the cells ratatui's
/// own diff finds (the same rules for wide characters, their trailing columns and cells
/// marked to skip), a little cheaper: one-byte symbols are compared directly, and a
/// symbol's width is looked up only when it is longer than a byte (109
/// instructions a cell under callgrind, ratatui's 139). Both are bound by reading the two
/// frames' cells, which a 1 s interval finds out of the cache.
pub fn changes<'a>(shown: &'a Buffer, next: &'a Buffer) -> Changes<'a> {
    assert_eq!(shown.area.width, next.area.width, "frames of one width");
    Changes {
        shown: &shown.content,
        next: &next.content,
        area: next.area,
        at: 0,
        trailing: None,
    }
}

/// The iterator `changes` returns.
#[derive(Debug)]
pub struct Changes<'a> {
    shown: &'a [Cell],
    next: &'a [Cell],
    area: Rect,
    /// The next cell to look at.
    at: usize,
    /// Trailing columns of a wide character still to look at.
    trailing: Option<Trailing>,
}

/// The trailing columns `at..end` of a wide character just written: all of them are
/// written when `every` (the character replaced a wider one whose style shows on blanks),
/// else those whose symbol changed (an emoji presentation sequence, which some terminals
/// draw one column wide).
#[derive(Debug)]
struct Trailing {
    at: usize,
    end: usize,
    every: bool,
}

impl<'a> Iterator for Changes<'a> {
    type Item = (u16, u16, &'a Cell);

    fn next(&mut self) -> Option<Self::Item> {
        let len = self.next.len().min(self.shown.len());
        if let Some(trailing) = &mut self.trailing {
            while trailing.at < trailing.end {
                let i = trailing.at;
                trailing.at += width(&self.next[i]).max(1);
                trailing.end = trailing.end.max(trailing.at).min(len);
                let now = &self.next[i];
                if !skipped(now) && (trailing.every || now.symbol() != self.shown[i].symbol()) {
                    return Some(self.placed(i));
                }
            }
            self.at = trailing.end;
            self.trailing = None;
        }
        while self.at < len {
            let i = self.at;
            self.at += 1;
            let (now, before) = (&self.next[i], &self.shown[i]);
            if skipped(now) {
                continue;
            }
            let width = width(now);
            if let CellDiffOption::ForcedWidth(_) = now.diff_option {
                self.at += width - 1;
                if same(now, before) {
                    continue;
                }
                return Some(self.placed(i));
            }
            if now.diff_option != CellDiffOption::AlwaysUpdate && same(now, before) {
                self.at += width.saturating_sub(1);
                continue;
            }
            let width_before = self::width(before);
            if width > 1 && now.symbol().contains('\u{FE0F}') {
                self.trailing = Some(Trailing {
                    at: i + 1,
                    end: (i + width).min(len),
                    every: false,
                });
            } else if width > 1 {
                self.at += width - 1;
            } else if width_before > width
                && (before.bg != Color::Reset || before.modifier.intersects(SHOWS_ON_BLANK))
            {
                self.trailing = Some(Trailing {
                    at: i + 1,
                    end: (i + width_before).min(len),
                    every: true,
                });
            }
            return Some(self.placed(i));
        }
        None
    }
}

impl<'a> Changes<'a> {
    fn placed(&self, index: usize) -> (u16, u16, &'a Cell) {
        let width = usize::from(self.area.width);
        let x = (index % width) as u16 + self.area.x;
        let y = (index / width) as u16 + self.area.y;
        (x, y, &self.next[index])
    }
}

/// Whether the cell is left out of the comparison (drawn over by a neighbour).
#[allow(deprecated)] // `skip`: still set by widgets that predate `CellDiffOption::Skip`
fn skipped(cell: &Cell) -> bool {
    cell.diff_option == CellDiffOption::Skip || (cell.skip && cell.diff_option == CellDiffOption::None)
}

/// Columns the cell takes.
fn width(cell: &Cell) -> usize {
    match cell.diff_option {
        CellDiffOption::ForcedWidth(width) => usize::from(width.get()),
        _ if cell.symbol().len() == 1 => 1,
        _ => usize::from(cell.cell_width()),
    }
}

/// Cell equality as ratatui defines it (a blank and a space are the same), with one-byte
/// symbols compared directly.
#[allow(deprecated)] // `skip`: compared as ratatui compares it
fn same(a: &Cell, b: &Cell) -> bool {
    let symbols = match (a.symbol().as_bytes(), b.symbol().as_bytes()) {
        ([x], [y]) => x == y,
        (x, y) => x == y,
    };
    symbols
        && a.fg == b.fg
        && a.bg == b.bg
        && a.modifier == b.modifier
        && a.diff_option == b.diff_option
        && a.skip == b.skip
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU16;

    use ratatui::style::Style;

    use super::*;

    /// A small deterministic generator (xorshift), so a failure names its seed.
    struct Draws(u64);

    impl Draws {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }
    }

    const TEXTS: [&str; 8] = [
        "gputop",
        " ",
        "表示",
        "❤\u{FE0F}x",
        "e\u{301}",
        "ab",
        "日本語",
        "42%",
    ];
    const COLORS: [Color; 4] = [Color::Reset, Color::Red, Color::Indexed(8), Color::Rgb(1, 2, 3)];
    const MODIFIERS: [Modifier; 3] = [Modifier::empty(), Modifier::BOLD, Modifier::REVERSED];

    /// A frame like a screen's: strings written in styles, on a blank buffer.
    fn frame(draws: &mut Draws, area: Rect) -> Buffer {
        let mut buffer = Buffer::empty(area);
        for _ in 0..draws.below(12) {
            let style = Style::default()
                .fg(COLORS[draws.below(4)])
                .bg(COLORS[draws.below(4)])
                .add_modifier(MODIFIERS[draws.below(3)]);
            let x = area.x + draws.below(usize::from(area.width)) as u16;
            let y = area.y + draws.below(usize::from(area.height)) as u16;
            let room = usize::from(area.right() - x);
            buffer.set_stringn(x, y, TEXTS[draws.below(TEXTS.len())], room, style);
        }
        for _ in 0..draws.below(3) {
            let x = area.x + draws.below(usize::from(area.width)) as u16;
            let y = area.y + draws.below(usize::from(area.height)) as u16;
            let cell = &mut buffer[(x, y)];
            match draws.below(4) {
                0 => cell.diff_option = CellDiffOption::Skip,
                1 => cell.diff_option = CellDiffOption::AlwaysUpdate,
                2 => cell.diff_option = CellDiffOption::ForcedWidth(NonZeroU16::MIN),
                #[allow(deprecated)]
                _ => cell.skip = true,
            }
        }
        buffer
    }

    /// Both frames are compared cell by cell every refresh. A dependency that turns ratatui's
    /// underline colour back on (ratatui-crossterm's defaults do) grows a cell by 8 bytes, and
    /// `same` would not see that colour change.
    #[test]
    fn a_cell_is_forty_bytes() {
        assert_eq!(std::mem::size_of::<Cell>(), 40);
    }

    #[test]
    fn changes_are_the_cells_ratatuis_diff_finds() {
        let area = Rect::new(2, 1, 9, 4);
        let mut draws = Draws(0x9e37_79b9_7f4a_7c15);
        for round in 0..5000 {
            let shown = frame(&mut draws, area);
            let next = if draws.below(4) == 0 {
                shown.clone()
            } else {
                frame(&mut draws, area)
            };
            let ours: Vec<_> = changes(&shown, &next).collect();
            let ratatuis = shown.diff(&next);
            assert_eq!(ours, ratatuis, "round {round}");
        }
    }

    #[test]
    fn an_unchanged_frame_has_no_changes_and_one_changed_cell_is_one_change() {
        let area = Rect::new(0, 0, 200, 50);
        let mut shown = Buffer::empty(area);
        for y in 0..50 {
            shown.set_string(0, y, "x".repeat(200), Style::default().fg(Color::Green));
        }
        let mut next = shown.clone();
        assert_eq!(changes(&shown, &next).count(), 0);
        next[(7, 3)].set_char('y');
        let found: Vec<_> = changes(&shown, &next)
            .map(|(x, y, c)| (x, y, c.symbol()))
            .collect();
        assert_eq!(found, vec![(7, 3, "y")]);
    }
}
