//! Table output shared by every list-style command.
//!
//! Two renderings, as zpool/zfs do: for people, a header line and columns padded to their widest
//! cell, separated by two spaces (numeric columns right-aligned, the last column never padded);
//! for scripts (`-H`), no header and the fields of a row joined by a single tab, cells untouched.
//! Number formatting (`-p` exact vs human-readable) is the caller's business: cells are strings.

use std::fmt::Write as _;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

#[derive(Debug, Clone)]
pub struct Column {
    pub header: String,
    pub align: Align,
}

impl Column {
    pub fn left(header: &str) -> Column {
        Column {
            header: header.to_string(),
            align: Align::Left,
        }
    }

    pub fn right(header: &str) -> Column {
        Column {
            header: header.to_string(),
            align: Align::Right,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Table {
    columns: Vec<Column>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(columns: Vec<Column>) -> Table {
        Table {
            columns,
            rows: Vec::new(),
        }
    }

    /// Adds a row; it must have one cell per column.
    pub fn push(&mut self, row: Vec<String>) {
        assert_eq!(
            row.len(),
            self.columns.len(),
            "row width must match the columns"
        );
        self.rows.push(row);
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Renders the table; `scripted` is `-H`. Every line ends with a newline.
    pub fn render(&self, scripted: bool) -> String {
        let mut out = String::new();
        if scripted {
            for row in &self.rows {
                out.push_str(&row.join("\t"));
                out.push('\n');
            }
            return out;
        }
        let widths: Vec<usize> = self
            .columns
            .iter()
            .enumerate()
            .map(|(index, column)| {
                self.rows
                    .iter()
                    .map(|row| row[index].chars().count())
                    .chain(std::iter::once(column.header.chars().count()))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let headers: Vec<String> = self.columns.iter().map(|c| c.header.clone()).collect();
        for row in std::iter::once(&headers).chain(self.rows.iter()) {
            let mut line = String::new();
            for (index, (cell, column)) in row.iter().zip(&self.columns).enumerate() {
                if index > 0 {
                    line.push_str("  ");
                }
                let width = widths[index];
                match column.align {
                    Align::Left => {
                        let _ = write!(line, "{cell:<width$}");
                    }
                    Align::Right => {
                        let _ = write!(line, "{cell:>width$}");
                    }
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// A table rendered for an interval report: the header only on the first report (and never
/// in scripted mode, which has none), as arcstat and zpool iostat print it.
pub fn interval_text(table: &Table, first: bool, scripted: bool) -> String {
    let text = table.render(scripted);
    if first || scripted {
        return text;
    }
    text.lines()
        .skip(1)
        .map(|line| format!("{line}\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Table {
        let mut table = Table::new(vec![
            Column::left("NAME"),
            Column::right("SIZE"),
            Column::left("HEALTH"),
        ]);
        table.push(vec!["tank".into(), "1.50G".into(), "ONLINE".into()]);
        table.push(vec!["backup-pool".into(), "16K".into(), "DEGRADED".into()]);
        table
    }

    #[test]
    fn human_output_pads_with_two_spaces_and_aligns_numbers_right() {
        let text = sample().render(false);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            vec![
                "NAME          SIZE  HEALTH",
                "tank         1.50G  ONLINE",
                "backup-pool    16K  DEGRADED",
            ]
        );
    }

    #[test]
    fn scripted_output_is_tab_separated_without_header() {
        let text = sample().render(true);
        assert_eq!(text, "tank\t1.50G\tONLINE\nbackup-pool\t16K\tDEGRADED\n");
    }

    #[test]
    fn empty_table_prints_only_the_header_for_people() {
        let table = Table::new(vec![Column::left("NAME"), Column::right("USED")]);
        assert!(table.is_empty());
        assert_eq!(table.render(false), "NAME  USED\n");
        assert_eq!(table.render(true), "");
    }
}
