//! One-pass drawing of text into the frame's buffer, for the main screen that is redrawn at
//! every refresh.
//!
//! ratatui's `Paragraph` and `Table` style every cell several times over (widget area, row,
//! cell, line, span) and split every string into graphemes; on the main screen that was most
//! of gputop's CPU time. These functions give the same cells: the given style is laid over
//! the area once, and each string is written once, ASCII and the bars' block characters a
//! character per cell and anything else through ratatui's own grapheme-aware `set_stringn`.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::Line;

/// Writes `text` from column `x` of row `y`, stopping before column `end` (and the buffer's
/// edge); returns the column after the last one written. Like `Buffer::set_stringn`, control
/// characters take no cell.
pub fn text(buffer: &mut Buffer, x: u16, y: u16, end: u16, text: &str, style: Style) -> u16 {
    let area = buffer.area;
    let end = end.min(area.right());
    if y < area.top() || y >= area.bottom() || x >= end {
        return x;
    }
    if !text.chars().all(one_cell) {
        return buffer.set_stringn(x, y, text, usize::from(end - x), style).0;
    }
    let start = buffer.index_of(x, y);
    let row = &mut buffer.content[start..start + usize::from(end - x)];
    let styled = style != Style::default();
    let mut written = 0;
    for (cell, ch) in row.iter_mut().zip(text.chars().filter(|c| !c.is_ascii_control())) {
        cell.set_char(ch);
        if styled {
            cell.set_style(style);
        }
        written += 1;
    }
    x + written
}

/// Whether `c` is drawn in one cell of its own, never joined to its neighbours into one
/// grapheme: ASCII, and the box-drawing and block characters of gputop's borders and bars
/// (U+2500 to U+259F). Anything else goes through ratatui's grapheme-aware writer.
fn one_cell(c: char) -> bool {
    c.is_ascii() || ('\u{2500}'..='\u{259F}').contains(&c)
}

/// One line in a one-row `area`, as `Paragraph` draws it (left-aligned, cut at the edge): each
/// span in the line's style patched with its own.
pub fn line(buffer: &mut Buffer, area: Rect, line: &Line) {
    if area.height == 0 {
        return;
    }
    let mut x = area.x;
    for span in &line.spans {
        let style = line.style.patch(span.style);
        x = text(buffer, x, area.y, area.right(), &span.content, style);
        if x >= area.right() {
            break;
        }
    }
}

/// Lines top to bottom in `area`, one per row (no wrapping), over `style`: what
/// `Paragraph::new(lines).style(style)` draws.
pub fn lines(buffer: &mut Buffer, area: Rect, lines: &[Line], style: Style) {
    if style != Style::default() {
        buffer.set_style(area, style);
    }
    for (y, each) in (area.top()..area.bottom()).zip(lines) {
        line(buffer, Rect { y, height: 1, ..area }, each);
    }
}

/// Marks a row whose text ran past its right edge: the last cell becomes `…` (`~` in ASCII),
/// in the style already there.
pub fn mark_cut(buffer: &mut Buffer, row: Rect, ascii: bool) {
    if row.width == 0 {
        return;
    }
    let (x, y) = (row.right() - 1, row.y);
    if let Some(cell) = buffer.cell_mut((x, y)) {
        cell.set_symbol(if ascii { "~" } else { "…" });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::style::{Color, Modifier};
    use ratatui::text::Span;
    use ratatui::widgets::{Paragraph, Widget};

    /// Draws with `paint` and with ratatui's Paragraph into equal buffers.
    fn same_as_paragraph(content: Vec<Line<'static>>, style: Style) {
        let area = Rect::new(0, 0, 12, 3);
        let mut ours = Buffer::empty(area);
        lines(&mut ours, area, &content, style);
        let mut theirs = Buffer::empty(area);
        Paragraph::new(content.clone())
            .style(style)
            .render(area, &mut theirs);
        assert_eq!(ours, theirs, "{content:?}");
    }

    #[test]
    fn draws_the_cells_paragraph_draws() {
        let red = Style::new().fg(Color::Red);
        let bold = Style::new().add_modifier(Modifier::BOLD);
        same_as_paragraph(vec![Line::from("plain")], Style::default());
        same_as_paragraph(
            vec![Line::from("exactly 12 c"), Line::from("longer than twelve")],
            red,
        );
        same_as_paragraph(
            vec![Line::from(vec![
                Span::styled("GPU ", bold),
                Span::raw("█████░"),
                Span::raw("├─┤▏"),
                Span::styled(" 88%", red),
            ])],
            Style::default(),
        );
        same_as_paragraph(vec![Line::styled("styled line", red), Line::from("x")], bold);
        same_as_paragraph(
            vec![Line::from("wide 漢字漢字漢字"), Line::from("e\u{301}t\u{e9}")],
            Style::default(),
        );
        same_as_paragraph(vec![Line::from("tab\there\u{7}")], Style::default());
        same_as_paragraph(
            vec![Line::from("1"), Line::from("2"), Line::from("3"), Line::from("4")],
            red,
        );
    }

    #[test]
    fn stops_at_the_end_and_the_edge() {
        let mut buffer = Buffer::empty(Rect::new(0, 0, 8, 2));
        assert_eq!(text(&mut buffer, 2, 0, 5, "abcdef", Style::default()), 5);
        assert_eq!(text(&mut buffer, 6, 1, 40, "abcdef", Style::default()), 8);
        assert_eq!(text(&mut buffer, 0, 2, 8, "below", Style::default()), 0);
        assert_eq!(buffer, Buffer::with_lines(["  abc   ", "      ab"]));
    }
}
