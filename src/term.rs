//! The terminal: raw mode, alternate screen, mouse; restored on every way out (drop, a
//! panic on any thread, the signals the event loop turns into a quit) and around Ctrl-Z.
//! Each frame is drawn into a ratatui buffer and compared, row by row, with what the terminal
//! shows; only the cells that changed are written.

use std::io::{self, Write};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use ratatui::backend::Backend;
use ratatui::buffer::{Buffer, Cell, CellWidth};
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier};
use ratatui_crossterm::CrosstermBackend;
use ratatui_crossterm::crossterm::event::{DisableMouseCapture, EnableMouseCapture};
use ratatui_crossterm::crossterm::terminal::{
    BeginSynchronizedUpdate, EndSynchronizedUpdate, EnterAlternateScreen, LeaveAlternateScreen,
    disable_raw_mode, enable_raw_mode,
};
use ratatui_crossterm::crossterm::{cursor, execute, queue};

/// Whether gputop holds the terminal (raw mode, alternate screen) now.
static ENTERED: AtomicBool = AtomicBool::new(false);

/// Held while the terminal is taken or given back, and by a panic from its message until
/// the exit, so a panic on one thread cannot interleave with the main thread entering the
/// terminal, nor leave it entered behind the message.
static HANDOVER: Mutex<()> = Mutex::new(());

fn handover() -> std::sync::MutexGuard<'static, ()> {
    HANDOVER.lock().unwrap_or_else(|e| e.into_inner())
}

/// The handover for a panic hook, which may run on the thread that holds it (a panic inside
/// the terminal's own calls): after a second it goes on without it rather than hang.
fn handover_for_panic() -> Option<std::sync::MutexGuard<'static, ()>> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
    loop {
        match HANDOVER.try_lock() {
            Ok(guard) => return Some(guard),
            Err(std::sync::TryLockError::Poisoned(e)) => return Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Err(std::sync::TryLockError::WouldBlock) => return None,
        }
    }
}

/// The exit code of a panic: EX_SOFTWARE, an internal error.
pub const PANIC_EXIT_CODE: i32 = 70;

/// Leaves raw mode and the alternate screen, if gputop entered them; safe to call more than
/// once, and from any thread.
pub fn restore() {
    let _handover = handover();
    give_back();
}

fn give_back() {
    if !ENTERED.swap(false, Ordering::SeqCst) {
        return;
    }
    // Raw mode first: the rest are plain writes.
    let _ = disable_raw_mode();
    let _ = execute!(
        io::stdout(),
        DisableMouseCapture,
        LeaveAlternateScreen,
        cursor::Show
    );
}

/// Makes a panic on any thread end gputop: the terminal restored, one line on stderr (what
/// and where, no backtrace) and exit code [`PANIC_EXIT_CODE`]. Without this, a panic on a
/// worker thread would leave the main thread running in a restored terminal.
pub fn end_on_panic() {
    std::panic::set_hook(Box::new(|info| {
        // Both held until the exit: the terminal is not entered again, and no frame is
        // written after the message.
        let _handover = handover_for_panic();
        let mut stdout = io::stdout().lock();
        give_back();
        let _ = stdout.flush();
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".into());
        let first_line = message.lines().next().unwrap_or("");
        let place = info
            .location()
            .map_or_else(String::new, |l| format!(" at {}:{}", l.file(), l.line()));
        let thread = std::thread::current();
        let line = format!(
            "gputop: internal error in thread '{}': {}{place}; please report it\n",
            gputop_core::format::sanitize(thread.name().unwrap_or("unnamed")),
            gputop_core::format::sanitize(first_line),
        );
        // One write, so nothing else on the terminal lands inside the line.
        let _ = io::stderr().write_all(line.as_bytes());
        std::process::exit(PANIC_EXIT_CODE);
    }));
}

/// The interactive terminal. Restores the terminal when dropped.
pub struct Term {
    screen: Screen<Gathered>,
}

impl std::fmt::Debug for Term {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Term")
    }
}

fn enter() -> io::Result<()> {
    let _handover = handover();
    ENTERED.store(true, Ordering::SeqCst);
    enable_raw_mode()?;
    execute!(
        io::stdout(),
        EnterAlternateScreen,
        EnableMouseCapture,
        cursor::Hide
    )
}

impl Term {
    pub fn enter() -> io::Result<Self> {
        let term = enter()
            .and_then(|()| terminal_size())
            .and_then(|area| Screen::new(Gathered(Vec::new()), area))
            .map(|screen| Self { screen });
        if term.is_err() {
            restore();
        }
        term
    }

    /// Draws one frame; only the cells that changed since the last are written.
    pub fn draw<R>(&mut self, render: impl FnOnce(&mut Buffer) -> R) -> io::Result<R> {
        self.screen.draw(render)
    }

    /// Ctrl-Z: give the terminal back, stop until `fg`, then take it again and redraw all.
    pub fn suspend(&mut self) -> io::Result<()> {
        restore();
        // SIGSTOP, not SIGTSTP: the kernel discards SIGTSTP for an orphaned process group
        // (gputop started without a job-control shell), while SIGSTOP always stops.
        // SAFETY: raising a signal at ourselves.
        unsafe { libc::raise(libc::SIGSTOP) };
        enter()?;
        self.screen.fit(terminal_size()?)
    }

    /// The terminal's new size, from its resize event: the screen is cleared, and the next
    /// frame drawn whole to fit it. The size is kept from these events rather than asked
    /// each frame: crossterm answers by opening /dev/tty for an ioctl each time.
    pub fn resize(&mut self, cols: u16, rows: u16) -> io::Result<()> {
        self.screen.fit(Rect::new(0, 0, cols, rows))
    }

    /// Clears the screen and forgets what was drawn, so the next frame is drawn whole.
    pub fn clear(&mut self) -> io::Result<()> {
        self.screen.clear()
    }
}

/// Frames as the bytes that take the terminal from the last frame to each.
///
/// ratatui's `Terminal` keeps the last frame's cells and compares every one of them with
/// the new frame's: two 200x50 frames are 780 KiB, and comparing their cells, strings and
/// all, was a third of gputop's instructions a refresh at 64 processes. Here what the
/// terminal shows is kept as glyphs (a character, its colours and modifiers), compared
/// without looking at strings, and the frame's buffer is the only one.
pub struct Screen<W: Write> {
    /// crossterm's writer of cells.
    out: CrosstermBackend<W>,
    /// The frame being drawn, blank before each.
    frame: Buffer,
    /// What the terminal shows, row by row, as the last frames left it.
    shown: Vec<Glyph>,
    /// Whether each row of `shown` has only glyphs: a row with a wide or combined grapheme
    /// is written whole whenever it is drawn.
    plain: Vec<bool>,
    /// Where in `frame` the cells to write this frame are.
    changed: Vec<usize>,
}

impl<W: Write> std::fmt::Debug for Screen<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Screen")
            .field("area", &self.frame.area)
            .finish_non_exhaustive()
    }
}

/// A cell that is one character of one column, as the terminal shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Glyph {
    symbol: char,
    fg: Color,
    bg: Color,
    modifier: Modifier,
}

impl Glyph {
    /// What a cleared terminal shows, and what a blank cell of the buffer is.
    const BLANK: Self = Self {
        symbol: ' ',
        fg: Color::Reset,
        bg: Color::Reset,
        modifier: Modifier::empty(),
    };

    /// The cell as a glyph; `None` for a grapheme of several characters or columns.
    fn of(cell: &Cell) -> Option<Self> {
        let text = cell.symbol();
        let symbol = match text.as_bytes() {
            [ascii] => char::from(*ascii),
            _ => {
                let mut chars = text.chars();
                let symbol = chars.next()?;
                (chars.next().is_none() && text.cell_width() == 1).then_some(symbol)?
            }
        };
        Some(Self {
            symbol,
            fg: cell.fg,
            bg: cell.bg,
            modifier: cell.modifier,
        })
    }
}

impl<W: Write> Screen<W> {
    /// A screen of `area`'s size that writes to `out`, cleared.
    pub fn new(out: W, area: Rect) -> io::Result<Self> {
        let mut screen = Self {
            out: CrosstermBackend::new(out),
            frame: Buffer::empty(Rect::default()),
            shown: Vec::new(),
            plain: Vec::new(),
            changed: Vec::new(),
        };
        screen.fit(area)?;
        Ok(screen)
    }

    /// Draws one frame: writes the cells that differ from what is shown, as one
    /// synchronized update, and nothing at all when none does.
    pub fn draw<R>(&mut self, render: impl FnOnce(&mut Buffer) -> R) -> io::Result<R> {
        self.frame.reset();
        let result = render(&mut self.frame);
        self.compare();
        if self.changed.is_empty() {
            return Ok(result);
        }
        let frame = &self.frame;
        let cells = self.changed.iter().map(|&i| {
            let (x, y) = frame.pos_of(i);
            (x, y, &frame.content[i])
        });
        queue!(self.out, BeginSynchronizedUpdate)?;
        self.out.draw(cells)?;
        queue!(self.out, EndSynchronizedUpdate)?;
        Backend::flush(&mut self.out)?;
        Ok(result)
    }

    /// Fills `changed` with where the frame differs from what is shown, and makes the
    /// frame what is shown.
    fn compare(&mut self) {
        self.changed.clear();
        let width = usize::from(self.frame.area.width);
        if width == 0 {
            return;
        }
        let rows = self.frame.content.chunks_exact(width);
        for ((y, cells), shown) in rows.enumerate().zip(self.shown.chunks_exact_mut(width)) {
            let start = y * width;
            let row_changes = self.changed.len();
            let mut plain = true;
            for (x, (cell, glyph)) in cells.iter().zip(shown.iter_mut()).enumerate() {
                match Glyph::of(cell) {
                    Some(new) if new != *glyph => {
                        self.changed.push(start + x);
                        *glyph = new;
                    }
                    Some(_) => {}
                    None => {
                        plain = false;
                        *glyph = Glyph::BLANK;
                    }
                }
            }
            // A row with a wide or combined grapheme, now or as it was shown, is written
            // whole, but not the columns a wide grapheme covers after its first.
            if !(plain && self.plain[y]) {
                self.changed.truncate(row_changes);
                let mut x = 0;
                while x < width {
                    self.changed.push(start + x);
                    x += usize::from(cells[x].symbol().cell_width().max(1));
                }
            }
            self.plain[y] = plain;
        }
    }

    /// Makes the frame `area`'s size, and the screen blank.
    fn fit(&mut self, area: Rect) -> io::Result<()> {
        self.frame.resize(area);
        self.shown.resize(area.area() as usize, Glyph::BLANK);
        self.plain.resize(usize::from(area.height), true);
        self.clear()
    }

    /// Clears the screen and forgets what was drawn, so the next frame is drawn whole.
    fn clear(&mut self) -> io::Result<()> {
        self.shown.fill(Glyph::BLANK);
        self.plain.fill(true);
        self.out.clear()?;
        Backend::flush(&mut self.out)
    }
}

impl Drop for Term {
    fn drop(&mut self) {
        restore();
    }
}

/// Bytes for the terminal, gathered until flushed and then written in one write, so a frame
/// wakes the reader (sshd, the terminal emulator) once.
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

/// The terminal's size as the kernel reports it now.
pub(crate) fn terminal_size() -> io::Result<Rect> {
    let (cols, rows) = ratatui_crossterm::crossterm::terminal::size()?;
    Ok(Rect::new(0, 0, cols, rows))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::style::Style;

    /// A small generator of frames: the same sequence on every run.
    struct Frames(u64);

    impl Frames {
        fn next(&mut self, below: usize) -> usize {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) as usize % below
        }

        /// Rows of ASCII, bars, wide and combined graphemes, in a few styles, at random places.
        fn draw(&mut self, buffer: &mut Buffer) {
            const TEXTS: [&str; 8] = [
                "gputop",
                "█▌ 42%",
                "漢字",
                "e\u{301}t\u{e9}",
                "…",
                "x",
                "🦀 ok",
                "    ",
            ];
            let colors = [
                Color::Reset,
                Color::Indexed(1),
                Color::Indexed(4),
                Color::Rgb(9, 99, 199),
            ];
            let area = buffer.area;
            for _ in 0..self.next(12) {
                let (x, y) = (self.next(area.width.into()), self.next(area.height.into()));
                let mut style = Style::new()
                    .fg(colors[self.next(colors.len())])
                    .bg(colors[self.next(colors.len())]);
                if self.next(3) == 0 {
                    style = style.add_modifier(Modifier::BOLD);
                }
                let text = TEXTS[self.next(TEXTS.len())];
                buffer.set_stringn(x as u16, y as u16, text, area.width.into(), style);
            }
        }
    }

    fn vt_color(color: Color) -> vt100::Color {
        match color {
            Color::Reset => vt100::Color::Default,
            Color::Indexed(i) => vt100::Color::Idx(i),
            Color::Rgb(r, g, b) => vt100::Color::Rgb(r, g, b),
            other => panic!("not drawn by the test: {other:?}"),
        }
    }

    /// The terminal, read back through an emulator, shows exactly the frame.
    fn assert_shows(terminal: &vt100::Parser, frame: &Buffer, step: usize) {
        let screen = terminal.screen();
        for y in 0..frame.area.height {
            for x in 0..frame.area.width {
                let shown = screen.cell(y, x).expect("inside the screen");
                if shown.is_wide_continuation() {
                    continue;
                }
                let cell = &frame[(x, y)];
                let what = format!("frame {step}, cell ({x}, {y})");
                let symbol = if shown.has_contents() {
                    shown.contents()
                } else {
                    " ".into()
                };
                assert_eq!(symbol, cell.symbol(), "{what}");
                assert_eq!(shown.fgcolor(), vt_color(cell.fg), "{what}");
                assert_eq!(shown.bgcolor(), vt_color(cell.bg), "{what}");
                assert_eq!(shown.bold(), cell.modifier.contains(Modifier::BOLD), "{what}");
            }
        }
    }

    /// What a screen writes, kept for the test to read.
    #[derive(Clone, Default)]
    struct Written(std::rc::Rc<std::cell::RefCell<Vec<u8>>>);

    impl Write for Written {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.borrow_mut().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A screen of `width` x `height` and the emulator it writes to.
    fn screen(width: u16, height: u16) -> (Screen<Written>, Written, vt100::Parser) {
        let written = Written::default();
        let screen = Screen::new(written.clone(), Rect::new(0, 0, width, height)).unwrap();
        (screen, written, vt100::Parser::new(height, width, 0))
    }

    /// Writes what the screen has written since the last call into the emulator; returns
    /// those bytes.
    fn take(written: &Written, terminal: &mut vt100::Parser) -> Vec<u8> {
        let bytes = std::mem::take(&mut *written.0.borrow_mut());
        terminal.process(&bytes);
        bytes
    }

    /// Draws the next of `frames`, passes what the screen wrote to the emulator, and returns
    /// the frame.
    fn draw_next(
        screen: &mut Screen<Written>,
        frames: &mut Frames,
        written: &Written,
        terminal: &mut vt100::Parser,
    ) -> Buffer {
        let mut frame = Buffer::empty(Rect::default());
        screen
            .draw(|buffer| {
                frames.draw(buffer);
                frame = buffer.clone();
            })
            .unwrap();
        take(written, terminal);
        frame
    }

    #[test]
    fn every_frame_leaves_the_terminal_showing_exactly_that_frame() {
        let (mut screen, written, mut terminal) = screen(24, 6);
        let mut frames = Frames(7);
        for step in 0..400 {
            let frame = draw_next(&mut screen, &mut frames, &written, &mut terminal);
            assert_shows(&terminal, &frame, step);
        }
    }

    #[test]
    fn an_unchanged_frame_writes_nothing_and_a_changed_cell_little_in_one_update() {
        let (mut screen, written, mut terminal) = screen(40, 10);
        let page = |buffer: &mut Buffer, word: &str| {
            for y in 0..10 {
                buffer.set_string(0, y, format!("row {y} of the page"), Style::new());
            }
            buffer.set_string(30, 4, word, Style::new().fg(Color::Indexed(2)));
        };
        screen.draw(|b| page(b, "first")).unwrap();
        let whole = take(&written, &mut terminal).len();
        screen.draw(|b| page(b, "first")).unwrap();
        assert_eq!(take(&written, &mut terminal), b"");
        screen.draw(|b| page(b, "firsT")).unwrap();
        let one = take(&written, &mut terminal);
        assert!(
            !one.is_empty() && one.len() * 10 < whole,
            "{} bytes for one cell, {whole} for all",
            one.len()
        );
        assert_eq!(terminal.screen().cell(4, 34).unwrap().contents(), "T");
        // One synchronized update: the terminal shows the frame whole, never half drawn.
        let text = String::from_utf8_lossy(&one);
        assert!(
            text.starts_with("\x1b[?2026h") && text.ends_with("\x1b[?2026l"),
            "{text:?}"
        );
    }

    #[test]
    fn a_new_size_clears_and_the_next_frame_is_drawn_whole() {
        let (mut screen, written, mut terminal) = screen(20, 5);
        let mut frames = Frames(3);
        draw_next(&mut screen, &mut frames, &written, &mut terminal);
        for (width, height) in [(30, 8), (12, 3), (20, 5)] {
            terminal.set_size(height, width);
            screen.fit(Rect::new(0, 0, width, height)).unwrap();
            let frame = draw_next(&mut screen, &mut frames, &written, &mut terminal);
            assert_shows(&terminal, &frame, usize::from(width));
        }
    }
}
