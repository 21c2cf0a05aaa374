//! The terminal: raw mode, alternate screen, mouse; restored on every way out (drop, panic,
//! the signals the event loop turns into a quit) and around Ctrl-Z.

use std::io::{self, Stdout, Write};
use std::sync::Once;

use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{DisableMouseCapture, EnableMouseCapture};
use ratatui::crossterm::terminal::{
    BeginSynchronizedUpdate, Clear, ClearType, EndSynchronizedUpdate, EnterAlternateScreen,
    LeaveAlternateScreen, disable_raw_mode, enable_raw_mode,
};
use ratatui::crossterm::{cursor, execute};

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

/// The interactive terminal; restores it when dropped.
pub struct Tui {
    pub terminal: Terminal<CrosstermBackend<Stdout>>,
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

impl Tui {
    pub fn enter() -> io::Result<Self> {
        install_panic_hook();
        if let Err(e) = enter() {
            restore();
            return Err(e);
        }
        let terminal = Terminal::new(CrosstermBackend::new(io::stdout()))?;
        Ok(Self { terminal })
    }

    /// Draws one frame inside a synchronized update, so the terminal shows it whole.
    pub fn draw<R>(&mut self, render: impl FnOnce(&mut ratatui::Frame) -> R) -> io::Result<R> {
        execute!(io::stdout(), BeginSynchronizedUpdate)?;
        let mut result = None;
        let drawn = self.terminal.draw(|frame| result = Some(render(frame)));
        execute!(io::stdout(), EndSynchronizedUpdate)?;
        io::stdout().flush()?;
        drawn?;
        result.ok_or_else(|| io::Error::other("nothing was drawn"))
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
    /// (ratatui's own `clear` asks the terminal for the cursor position, and the answer
    /// would be read by the input thread instead.)
    pub fn clear(&mut self) -> io::Result<()> {
        execute!(io::stdout(), Clear(ClearType::All))?;
        self.terminal = Terminal::new(CrosstermBackend::new(io::stdout()))?;
        Ok(())
    }
}

impl Drop for Tui {
    fn drop(&mut self) {
        restore();
    }
}
