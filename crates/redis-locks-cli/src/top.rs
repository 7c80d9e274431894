//! `redis-locks top [PATTERN]`: the locks of `list`, live in the terminal — read again every
//! `--interval`, the most waited-for first, each lease counting down between readings. `q`,
//! Esc or Ctrl-C quits. Not on a terminal it says so and exits 64 (`list` is for scripts).

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Cell, Paragraph, Row as TableRow, Table};
use tokio::sync::watch;

use crate::list::{Lister, Row};
use cli_support::endpoint::Endpoint;
use cli_support::exit::CliError;

/// How often the screen is drawn again (the leases count down in between readings).
const FRAME: Duration = Duration::from_millis(100);

/// What the screen shows: the latest reading, when it was taken, and the error of the latest
/// attempt if it failed (the rows of the reading before stay, marked as old).
#[derive(Default)]
struct Reading {
    rows: Vec<Row>,
    at: Option<Instant>,
    error: Option<String>,
}

/// Shows the locks matching `pattern` live until the user quits.
///
/// # Errors
/// [`CliError::Usage`] when stdout is not a terminal (and as `list` says for a bad pattern or
/// several `--redis`); what connecting and the first reading say.
pub async fn run(
    endpoint: &Endpoint,
    pattern: Option<&str>,
    interval: Duration,
) -> Result<(), CliError> {
    if !std::io::stdout().is_terminal() {
        return Err(CliError::Usage(
            "top needs a terminal; for scripts use `redis-locks list` (with --json)".into(),
        ));
    }
    let mut lister = Lister::open(endpoint, pattern).await?;
    let first = lister.rows().await?;
    let (readings, reading) = watch::channel(Reading {
        rows: first,
        at: Some(Instant::now()),
        error: None,
    });
    let reader = tokio::spawn(async move {
        loop {
            tokio::time::sleep(interval).await;
            let next = lister.rows().await;
            readings.send_modify(|reading| match next {
                Ok(rows) => {
                    *reading = Reading {
                        rows,
                        at: Some(Instant::now()),
                        error: None,
                    }
                }
                Err(err) => reading.error = Some(err.to_string()),
            });
            if readings.is_closed() {
                break;
            }
        }
    });
    let title = format!(
        "redis-locks top: {}",
        cli_support::redact(endpoint.first_url())
    );
    let shown = tokio::task::spawn_blocking(move || show(&title, reading)).await;
    reader.abort();
    match shown {
        Ok(result) => result.map_err(|err| CliError::Unavailable(format!("the terminal: {err}"))),
        Err(err) => Err(CliError::Unavailable(format!("the screen stopped: {err}"))),
    }
}

/// Draws `reading` every [`FRAME`] until a key quits.
fn show(title: &str, reading: watch::Receiver<Reading>) -> std::io::Result<()> {
    let mut terminal = ratatui::init();
    let result = (|| loop {
        terminal.draw(|frame| draw(frame, title, &reading.borrow()))?;
        if event::poll(FRAME)?
            && let Event::Key(key) = event::read()?
            && key.kind == KeyEventKind::Press
        {
            let ctrl_c =
                key.code == KeyCode::Char('c') && key.modifiers.contains(KeyModifiers::CONTROL);
            if matches!(key.code, KeyCode::Char('q') | KeyCode::Esc) || ctrl_c {
                return Ok(());
            }
        }
    })();
    ratatui::restore();
    result
}

/// One screen: a title line, the table, a line of help.
fn draw(frame: &mut ratatui::Frame, title: &str, reading: &Reading) {
    let [top, middle, bottom] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(1),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    let age = reading.at.map(|at| at.elapsed()).unwrap_or_default();
    let mut status = format!("{title}   {} locks", reading.rows.len());
    if let Some(error) = &reading.error {
        status.push_str(&format!(
            "   reading failed ({error}); showing the one of {}s ago",
            age.as_secs()
        ));
    }
    frame.render_widget(Paragraph::new(Line::from(status)), top);
    let mut rows: Vec<&Row> = reading.rows.iter().collect();
    rows.sort_by(|a, b| order(a, b));
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let header =
        TableRow::new(["NAME", "KIND", "HOLDERS", "LEASE", "WAITING", "FENCING"]).style(bold);
    let lines = rows.iter().map(|row| {
        TableRow::new([
            Cell::from(row.name.clone()),
            Cell::from(row.kind),
            Cell::from(holders(row)),
            Cell::from(lease(row, age)),
            Cell::from(row.waiting.to_string()),
            Cell::from(
                row.fencing_counter
                    .map(|counter| counter.to_string())
                    .unwrap_or_else(|| "-".into()),
            ),
        ])
    });
    let table = Table::new(
        lines,
        [
            Constraint::Fill(3),
            Constraint::Length(9),
            Constraint::Length(7),
            Constraint::Length(10),
            Constraint::Length(7),
            Constraint::Length(17),
        ],
    )
    .header(header);
    frame.render_widget(table, middle);
    frame.render_widget(
        Paragraph::new(
            "q quits   sorted by waiters, then by the lease left (how long they may still wait)",
        ),
        bottom,
    );
}

/// The most waited-for first; among equals the lease that ends last first (its waiters may
/// wait longest), then by name.
fn order(a: &Row, b: &Row) -> std::cmp::Ordering {
    b.waiting
        .cmp(&a.waiting)
        .then(b.lease_remaining_ms.cmp(&a.lease_remaining_ms))
        .then(a.name.cmp(&b.name))
}

/// Holders as `list` prints them: a count, or a semaphore's permits in use of N.
fn holders(row: &Row) -> String {
    match row.permits {
        Some(n) => format!("{}/{n}", row.permits_in_use()),
        None => row.holders.len().to_string(),
    }
}

/// The shortest lease left, counted down by the time since the reading, to a tenth of a
/// second.
fn lease(row: &Row, age: Duration) -> String {
    match row.lease_remaining_ms {
        Some(left) => {
            let left = Duration::from_millis(left).saturating_sub(age);
            format!("{:.1}s", left.as_secs_f64())
        }
        None => "-".into(),
    }
}
