//! A time-series chart: braille dots (2×4 per cell), or `*` in ASCII mode; a y axis with its
//! top, middle and bottom values and a time axis labelled in seconds, minutes or hours
//! before now. Gaps in the data stay gaps.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::widgets::Widget;

/// One chart's data and looks.
#[derive(Debug, Clone)]
pub struct TimeChart<'a> {
    pub points: &'a [(f64, Option<f64>)],
    /// Time range shown, seconds since the epoch.
    pub from: f64,
    pub to: f64,
    /// The y range starts at 0 and reaches at least `min_top`.
    pub min_top: f64,
    pub unit: &'a str,
    pub ascii: bool,
    pub style: Style,
    pub axis_style: Style,
}

/// "-10m", "-30s", "-2h": how long before now.
pub fn ago_label(seconds: f64) -> String {
    let s = seconds.round() as i64;
    if s == 0 {
        "now".into()
    } else if s % 3600 == 0 {
        format!("-{}h", s / 3600)
    } else if s >= 120 && s % 60 == 0 {
        format!("-{}m", s / 60)
    } else if s >= 120 && s % 30 == 0 {
        format!("-{:.1}m", s as f64 / 60.0)
    } else if s >= 7200 {
        format!("-{:.1}h", s as f64 / 3600.0)
    } else if s >= 120 {
        format!("-{}m", s / 60)
    } else {
        format!("-{s}s")
    }
}

/// Whole numbers: halves round up (104.5 is "105"), where formatting alone would round
/// them to even.
fn axis_number(value: f64) -> String {
    if value >= 10_000.0 {
        format!("{:.0}k", (value / 1000.0).round())
    } else if value >= 100.0 || value.fract() == 0.0 {
        format!("{:.0}", value.round())
    } else {
        format!("{value:.1}")
    }
}

impl Widget for TimeChart<'_> {
    fn render(self, area: Rect, buf: &mut Buffer) {
        let axis_width: u16 = 7;
        if area.width <= axis_width + 4 || area.height < 3 {
            return;
        }
        let plot = Rect {
            x: area.x + axis_width,
            y: area.y,
            width: area.width - axis_width,
            height: area.height - 1,
        };
        let top = self
            .points
            .iter()
            .filter_map(|(_, v)| *v)
            .fold(self.min_top, f64::max)
            .max(1e-9);
        // The y axis: top, middle, zero.
        for (row, value) in [(0, top), (plot.height / 2, top / 2.0), (plot.height - 1, 0.0)] {
            let label = format!(
                "{:>5}{}",
                axis_number(value),
                if row == 0 { self.unit } else { "" }
            );
            let label: String = label.chars().take(axis_width as usize - 1).collect();
            buf.set_string(area.x, plot.y + row, format!("{label:>6}"), self.axis_style);
            buf.set_string(area.x + axis_width - 1, plot.y + row, "|", self.axis_style);
        }
        // The time axis: now at the right, four more ticks leftwards.
        let span = (self.to - self.from).max(1e-9);
        let axis_y = plot.y + plot.height;
        for tick in 0..=4u16 {
            let x = plot.x + ((plot.width - 1) as u32 * u32::from(tick) / 4) as u16;
            let ago = span * f64::from(4 - tick) / 4.0;
            let label = ago_label(ago);
            let start = x
                .saturating_sub(label.len() as u16 / 2)
                .max(plot.x)
                .min(plot.x + plot.width - label.len() as u16);
            buf.set_string(start, axis_y, &label, self.axis_style);
        }
        let (dots_x, dots_y) = if self.ascii { (1, 1) } else { (2, 4) };
        let columns = u32::from(plot.width) * dots_x;
        let rows = u32::from(plot.height) * dots_y;
        let mut dots = vec![false; (columns * rows) as usize];
        let to_dot = |t: f64, v: f64| -> (u32, u32) {
            let x = ((t - self.from) / span * f64::from(columns - 1))
                .round()
                .clamp(0.0, f64::from(columns - 1)) as u32;
            let y = ((1.0 - v / top) * f64::from(rows - 1))
                .round()
                .clamp(0.0, f64::from(rows - 1)) as u32;
            (x, y)
        };
        let mut previous: Option<(u32, u32)> = None;
        for (t, value) in self
            .points
            .iter()
            .filter(|(t, _)| *t >= self.from && *t <= self.to)
        {
            let Some(v) = value else {
                previous = None;
                continue;
            };
            let (x, y) = to_dot(*t, *v);
            // Join to the previous point, so steep changes read as lines, not scattered dots.
            if let Some((px, py)) = previous {
                let steps = px.abs_diff(x).max(py.abs_diff(y)).max(1);
                for step in 0..=steps {
                    let f = f64::from(step) / f64::from(steps);
                    let ix = (f64::from(px) + (f64::from(x) - f64::from(px)) * f).round() as u32;
                    let iy = (f64::from(py) + (f64::from(y) - f64::from(py)) * f).round() as u32;
                    dots[(iy * columns + ix) as usize] = true;
                }
            } else {
                dots[(y * columns + x) as usize] = true;
            }
            previous = Some((x, y));
        }
        for cy in 0..u32::from(plot.height) {
            for cx in 0..u32::from(plot.width) {
                let symbol = if self.ascii {
                    if dots[(cy * columns + cx) as usize] {
                        Some('*')
                    } else {
                        None
                    }
                } else {
                    // Braille dot numbering: columns 0/1, rows 0..3.
                    const BITS: [[u32; 2]; 4] = [[0x01, 0x08], [0x02, 0x10], [0x04, 0x20], [0x40, 0x80]];
                    let mut bits = 0;
                    for (dy, row_bits) in BITS.iter().enumerate() {
                        for (dx, bit) in row_bits.iter().enumerate() {
                            let x = cx * 2 + dx as u32;
                            let y = cy * 4 + dy as u32;
                            if dots[(y * columns + x) as usize] {
                                bits |= bit;
                            }
                        }
                    }
                    (bits != 0).then(|| char::from_u32(0x2800 + bits).unwrap_or(' '))
                };
                if let Some(symbol) = symbol {
                    buf[(plot.x + cx as u16, plot.y + cy as u16)]
                        .set_char(symbol)
                        .set_style(self.style);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(chart: TimeChart<'_>, width: u16, height: u16) -> Vec<String> {
        let area = Rect::new(0, 0, width, height);
        let mut buf = Buffer::empty(area);
        chart.render(area, &mut buf);
        (0..height)
            .map(|y| (0..width).map(|x| buf[(x, y)].symbol().to_string()).collect())
            .collect()
    }

    #[test]
    fn a_step_is_drawn_with_axes_and_a_gap_stays_empty() {
        let points: Vec<(f64, Option<f64>)> = (0..=60)
            .map(|s| {
                let v = if (20..30).contains(&s) {
                    None
                } else if s < 40 {
                    Some(10.0)
                } else {
                    Some(100.0)
                };
                (f64::from(s), v)
            })
            .collect();
        let chart = TimeChart {
            points: &points,
            from: 0.0,
            to: 60.0,
            min_top: 100.0,
            unit: "%",
            ascii: true,
            style: Style::default(),
            axis_style: Style::default(),
        };
        let lines = render(chart, 40, 6);
        assert!(lines[0].starts_with("  100%|"), "{lines:#?}");
        assert!(lines[4].starts_with("     0|"), "{lines:#?}");
        assert!(
            lines[5].contains("-60s") && lines[5].contains("now"),
            "{lines:#?}"
        );
        // 100 from 40 s on: the top row has stars only in the last third.
        let top: Vec<usize> = lines[0]
            .char_indices()
            .filter(|(_, c)| *c == '*')
            .map(|(i, _)| i)
            .collect();
        assert!(!top.is_empty() && top[0] >= 7 + 33 * 40 / 60 - 1, "{lines:#?}");
        // The gap from 20 s to 30 s has no dot on the low row.
        let low = &lines[4];
        let gap_x = 7 + (25 * 32 / 60) as usize;
        assert_eq!(&low[gap_x..gap_x + 1], " ", "{lines:#?}");
    }
}
