//! The terminal: raw mode, alternate screen, mouse; restored on every way out (drop, a
//! panic on any thread, the signals the event loop turns into a quit) and around Ctrl-Z.
//! Frames are drawn by ratatui's `Terminal`, through a backend that writes nothing for an
//! unchanged frame.

use std::io::{self, Write};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use ratatui::Terminal;
use ratatui::backend::{Backend, ClearType, WindowSize};
use ratatui::buffer::{Buffer, Cell};
use ratatui::layout::{Position, Size};
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
            gputop::format::sanitize(thread.name().unwrap_or("unnamed")),
            gputop::format::sanitize(first_line),
        );
        // One write, so nothing else on the terminal lands inside the line.
        let _ = io::stderr().write_all(line.as_bytes());
        std::process::exit(PANIC_EXIT_CODE);
    }));
}

/// The interactive terminal. Restores the terminal when dropped.
pub struct Term {
    terminal: Terminal<Quiet>,
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
        if let Err(e) = enter() {
            restore();
            return Err(e);
        }
        let terminal = terminal_size().and_then(|size| {
            Terminal::new(Quiet {
                inner: CrosstermBackend::new(Gathered(Vec::new())),
                cursor_hidden: true,
                cursor: Position::ORIGIN,
                size,
            })
        });
        match terminal {
            Ok(terminal) => Ok(Self { terminal }),
            Err(e) => {
                restore();
                Err(e)
            }
        }
    }

    /// Draws one frame; only the cells that changed since the last are written.
    pub fn draw<R>(&mut self, render: impl FnOnce(&mut Buffer) -> R) -> io::Result<R> {
        let mut result = None;
        self.terminal
            .draw(|frame| result = Some(render(frame.buffer_mut())))?;
        Ok(result.expect("ratatui calls the render function once"))
    }

    /// Ctrl-Z: give the terminal back, stop until `fg`, then take it again and redraw all.
    pub fn suspend(&mut self) -> io::Result<()> {
        restore();
        // SIGSTOP, not SIGTSTP: the kernel discards SIGTSTP for an orphaned process group
        // (gputop started without a job-control shell), while SIGSTOP always stops.
        // SAFETY: raising a signal at ourselves.
        unsafe { libc::raise(libc::SIGSTOP) };
        enter()?;
        let backend = self.terminal.backend_mut();
        backend.cursor_hidden = true;
        backend.size = terminal_size()?;
        self.clear()
    }

    /// The terminal's new size, from its resize event; the next frame is drawn to fit it.
    pub fn resize(&mut self, cols: u16, rows: u16) {
        self.terminal.backend_mut().size = Size::new(cols, rows);
    }

    /// Clears the screen and forgets what was drawn, so the next frame is drawn whole.
    pub fn clear(&mut self) -> io::Result<()> {
        self.terminal.clear()
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

/// The crossterm backend, quiet when there is nothing to say: a frame without changed
/// cells writes nothing (crossterm's backend would still reset the colours, and ratatui
/// hides the cursor every frame), and a frame with changes is one synchronized update.
///
/// The cursor stays hidden, and its position is never asked of the terminal: ratatui asks it
/// to clear the screen, and the answer would race the input thread for stdin.
///
/// The size is read once and then kept from resize events: ratatui asks it every frame, and
/// crossterm answers by opening /dev/tty for an ioctl each time (3% of live CPU at 1 s).
struct Quiet {
    inner: CrosstermBackend<Gathered>,
    cursor_hidden: bool,
    cursor: Position,
    size: Size,
}

/// The terminal's size as the kernel reports it now.
fn terminal_size() -> io::Result<Size> {
    let (cols, rows) = ratatui_crossterm::crossterm::terminal::size()?;
    Ok(Size::new(cols, rows))
}

impl Backend for Quiet {
    type Error = io::Error;

    fn draw<'a, I>(&mut self, content: I) -> io::Result<()>
    where
        I: Iterator<Item = (u16, u16, &'a Cell)>,
    {
        let mut content = content.peekable();
        if content.peek().is_none() {
            return Ok(());
        }
        queue!(self.inner, BeginSynchronizedUpdate)?;
        self.inner.draw(content)?;
        queue!(self.inner, EndSynchronizedUpdate)
    }

    fn hide_cursor(&mut self) -> io::Result<()> {
        if self.cursor_hidden {
            return Ok(());
        }
        self.cursor_hidden = true;
        self.inner.hide_cursor()
    }

    fn show_cursor(&mut self) -> io::Result<()> {
        self.cursor_hidden = false;
        self.inner.show_cursor()
    }

    fn get_cursor_position(&mut self) -> io::Result<Position> {
        Ok(self.cursor)
    }

    fn set_cursor_position<P: Into<Position>>(&mut self, position: P) -> io::Result<()> {
        self.cursor = position.into();
        self.inner.set_cursor_position(self.cursor)
    }

    fn clear(&mut self) -> io::Result<()> {
        self.inner.clear()
    }

    fn clear_region(&mut self, clear_type: ClearType) -> io::Result<()> {
        self.inner.clear_region(clear_type)
    }

    fn size(&self) -> io::Result<Size> {
        Ok(self.size)
    }

    fn window_size(&mut self) -> io::Result<WindowSize> {
        self.inner.window_size()
    }

    fn flush(&mut self) -> io::Result<()> {
        Backend::flush(&mut self.inner)
    }
}
