//! Progress output of a training epoch, on stderr: a live bar on a terminal, a few plain
//! lines when stderr is a file or a pipe (CI logs), nothing when silent. Every mode ends an
//! epoch with the same summary line, e.g.
//!
//! ```text
//! epoch  3/10  loss 0.2312  acc 93.10%  val_loss 0.2511  val_acc 92.40%  4.1s  9,770 samples/s
//! ```
//!
//! Output errors (a closed pipe) are ignored: progress reporting never stops training.

use std::io::{IsTerminal, Write};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How progress is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgressMode {
    /// A live progress bar with running loss, accuracy and throughput, replaced by the
    /// summary line when the epoch ends.
    Bar,
    /// Plain lines: a short line at 25%, 50% and 75% of long epochs and the summary line.
    Lines,
    /// No output.
    Silent,
}

impl ProgressMode {
    /// `Silent` unless `verbose`; then `Bar` when stderr is a terminal, else `Lines`.
    pub fn auto(verbose: bool) -> ProgressMode {
        match (verbose, std::io::stderr().is_terminal()) {
            (false, _) => ProgressMode::Silent,
            (true, true) => ProgressMode::Bar,
            (true, false) => ProgressMode::Lines,
        }
    }
}

/// What one epoch achieved, for its summary line. Accuracies are fractions in `0..=1`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EpochSummary {
    pub train_loss: f64,
    pub train_acc: Option<f64>,
    pub val_loss: Option<f64>,
    pub val_acc: Option<f64>,
    /// Wall-clock seconds of the epoch.
    pub seconds: f64,
    /// Training samples per second.
    pub samples_per_sec: f64,
    /// Learning rate of the epoch, when there is one to show.
    pub lr: Option<f64>,
    /// Steps whose update was skipped for a NaN or infinite loss (`NonFinitePolicy::SkipStep`).
    pub skipped_steps: usize,
}

/// The live bar: `epoch  3/10 [====>      ] 47/188 eta 3s  loss 0.3121  acc 90.12%  9,770 samples/s`.
const BAR_TEMPLATE: &str = "{prefix} [{bar:16}] {pos}/{len} eta {eta}  {msg}";

/// Epochs with fewer batches than this get no intermediate lines in `Lines` mode.
const MIN_BATCHES_FOR_LINES: usize = 8;

/// The progress display of one epoch. `epoch` counts from 1, as printed (`epoch 1/10`).
pub struct Progress {
    mode: ProgressMode,
    epoch: usize,
    epochs: usize,
    total_batches: usize,
    total_samples: usize,
    out: Box<dyn Write + Send>,
    bar: Option<ProgressBar>,
    start: Instant,
    /// Lines mode: the next quarter (1, 2, 3) of the epoch to report.
    next_quarter: usize,
}

impl Progress {
    /// Progress of epoch `epoch` of `epochs` (from 1), written to stderr.
    pub fn new(
        mode: ProgressMode,
        epoch: usize,
        epochs: usize,
        total_batches: usize,
        total_samples: usize,
    ) -> Progress {
        let target = ProgressDrawTarget::stderr();
        Self::build(mode, epoch, epochs, total_batches, total_samples, Box::new(std::io::stderr()), target)
    }

    /// Like [`Progress::new`], with lines and the summary written to `out`. The live bar
    /// of `Bar` mode is not drawn (it needs a terminal); its summary line is.
    pub fn with_writer(
        mode: ProgressMode,
        epoch: usize,
        epochs: usize,
        total_batches: usize,
        total_samples: usize,
        out: Box<dyn Write + Send>,
    ) -> Progress {
        Self::build(mode, epoch, epochs, total_batches, total_samples, out, ProgressDrawTarget::hidden())
    }

    fn build(
        mode: ProgressMode,
        epoch: usize,
        epochs: usize,
        total_batches: usize,
        total_samples: usize,
        out: Box<dyn Write + Send>,
        target: ProgressDrawTarget,
    ) -> Progress {
        let bar = (mode == ProgressMode::Bar).then(|| {
            let bar = ProgressBar::with_draw_target(Some(total_batches as u64), target);
            // The template is a constant; should it ever fail to parse, the default style is used.
            if let Ok(style) = ProgressStyle::with_template(BAR_TEMPLATE) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.set_prefix(epoch_label(epoch, epochs));
            bar
        });
        Progress { mode, epoch, epochs, total_batches, total_samples, out, bar, start: Instant::now(), next_quarter: 1 }
    }

    /// Reports that batch `batch_index` (from 0) is done, `samples_done` samples into the
    /// epoch, with the running mean loss and accuracy so far.
    pub fn update(&mut self, batch_index: usize, samples_done: usize, running_loss: f64, running_acc: Option<f64>) {
        let done = batch_index + 1;
        let rate = samples_done as f64 / self.start.elapsed().as_secs_f64().max(1e-9);
        match self.mode {
            ProgressMode::Silent => {}
            ProgressMode::Bar => {
                if let Some(bar) = &self.bar {
                    bar.set_position(done as u64);
                    bar.set_message(running_stats(running_loss, running_acc, rate));
                }
            }
            ProgressMode::Lines => {
                if self.total_batches < MIN_BATCHES_FOR_LINES || self.next_quarter > 3 {
                    return;
                }
                if done * 4 < self.next_quarter * self.total_batches {
                    return;
                }
                while self.next_quarter <= 3 && done * 4 >= self.next_quarter * self.total_batches {
                    self.next_quarter += 1;
                }
                let percent = 100 * done / self.total_batches.max(1);
                let line = format!(
                    "{}  {percent:>3}%  {}/{} samples  {}",
                    epoch_label(self.epoch, self.epochs),
                    samples_done,
                    self.total_samples,
                    running_stats(running_loss, running_acc, rate)
                );
                let _ = writeln!(self.out, "{line}");
            }
        }
    }

    /// Ends the epoch: clears the bar and prints the summary line (nothing when silent).
    pub fn finish(&mut self, summary: &EpochSummary) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        if self.mode != ProgressMode::Silent {
            let _ = writeln!(self.out, "{}", format_summary(self.epoch, self.epochs, summary));
            let _ = self.out.flush();
        }
    }
}

impl Drop for Progress {
    /// A bar left behind by an epoch that ended early (an error) is cleared.
    fn drop(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

/// The summary line of an epoch, e.g.
/// `epoch  3/10  loss 0.2312  acc 93.10%  val_loss 0.2511  val_acc 92.40%  4.1s  9,770 samples/s`
/// (absent values are left out; a learning rate is appended as `lr 0.001`).
pub fn format_summary(epoch: usize, epochs: usize, s: &EpochSummary) -> String {
    let mut parts = vec![epoch_label(epoch, epochs), format!("loss {:.4}", s.train_loss)];
    parts.extend(s.train_acc.map(|a| format!("acc {}", percent(a))));
    parts.extend(s.val_loss.map(|l| format!("val_loss {l:.4}")));
    parts.extend(s.val_acc.map(|a| format!("val_acc {}", percent(a))));
    parts.push(format!("{:.1}s", s.seconds));
    parts.push(format!("{} samples/s", thousands(s.samples_per_sec)));
    parts.extend(s.lr.map(|lr| format!("lr {}", format_lr(lr))));
    if s.skipped_steps > 0 {
        parts.push(format!("skipped {} steps with a non-finite loss", s.skipped_steps));
    }
    parts.join("  ")
}

/// `epoch  3/10`, the epoch right-aligned to the width of the total.
fn epoch_label(epoch: usize, epochs: usize) -> String {
    let width = epochs.to_string().len();
    format!("epoch {epoch:>width$}/{epochs}")
}

fn running_stats(loss: f64, acc: Option<f64>, samples_per_sec: f64) -> String {
    let acc = acc.map(|a| format!("  acc {}", percent(a))).unwrap_or_default();
    format!("loss {loss:.4}{acc}  {} samples/s", thousands(samples_per_sec))
}

fn percent(fraction: f64) -> String {
    format!("{:.2}%", fraction * 100.0)
}

/// A rate rounded to an integer with thousands separators: `9,770`.
fn thousands(value: f64) -> String {
    if !value.is_finite() {
        return format!("{value}");
    }
    let digits = format!("{:.0}", value.abs());
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if value < 0.0 && digits != "0" {
        out.insert(0, '-');
    }
    out
}

/// A learning rate without float noise: `0.001`, `0.0812`, `1.00e-5`.
fn format_lr(lr: f64) -> String {
    if lr == 0.0 || !lr.is_finite() {
        return format!("{lr}");
    }
    if (1e-3..1e4).contains(&lr.abs()) {
        let fixed = format!("{lr:.6}");
        return fixed.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    format!("{lr:.2e}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A writer whose output the test can read afterwards.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().map_err(|_| std::io::Error::other("poisoned"))?.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Shared {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().map(|v| v.clone()).unwrap_or_default()).unwrap_or_default()
        }
    }

    fn summary() -> EpochSummary {
        EpochSummary {
            train_loss: 0.23124,
            train_acc: Some(0.931),
            val_loss: Some(0.25106),
            val_acc: Some(0.924),
            seconds: 4.07,
            samples_per_sec: 9770.4,
            lr: None,
            skipped_steps: 0,
        }
    }

    /// Runs one epoch of `batches` batches of 10 samples through a progress display.
    fn run_epoch(mode: ProgressMode, batches: usize) -> String {
        let out = Shared::default();
        let mut progress = Progress::with_writer(mode, 2, 5, batches, batches * 10, Box::new(out.clone()));
        for b in 0..batches {
            progress.update(b, (b + 1) * 10, 0.5, Some(0.75));
        }
        progress.finish(&summary());
        out.text()
    }

    #[test]
    fn summary_line_format() {
        let line = format_summary(3, 10, &summary());
        assert_eq!(
            line,
            "epoch  3/10  loss 0.2312  acc 93.10%  val_loss 0.2511  val_acc 92.40%  4.1s  9,770 samples/s"
        );
        let bare = EpochSummary { train_loss: 1.5, seconds: 0.04, samples_per_sec: 1_234_567.8, ..Default::default() };
        assert_eq!(format_summary(1, 1, &bare), "epoch 1/1  loss 1.5000  0.0s  1,234,568 samples/s");
        let with_lr = EpochSummary { lr: Some(0.1 * 0.9 * 0.9), ..bare.clone() };
        assert!(
            format_summary(12, 100, &with_lr).ends_with("samples/s  lr 0.081"),
            "{}",
            format_summary(12, 100, &with_lr)
        );
        let tiny_lr = EpochSummary { lr: Some(1e-5), train_loss: f64::NAN, samples_per_sec: 999.0, ..bare.clone() };
        assert_eq!(format_summary(7, 100, &tiny_lr), "epoch   7/100  loss NaN  0.0s  999 samples/s  lr 1.00e-5");
        let skipped = EpochSummary { skipped_steps: 2, ..bare };
        assert!(format_summary(1, 1, &skipped).ends_with("samples/s  skipped 2 steps with a non-finite loss"));
    }

    #[test]
    fn thousands_separators() {
        let cases = [(0.0, "0"), (999.4, "999"), (1000.0, "1,000"), (123456.0, "123,456"), (-4321.0, "-4,321")];
        for (value, text) in cases {
            assert_eq!(thousands(value), text);
        }
        assert_eq!(thousands(f64::INFINITY), "inf");
    }

    #[test]
    fn silent_writes_nothing() {
        assert_eq!(run_epoch(ProgressMode::Silent, 40), "");
    }

    #[test]
    fn lines_mode_reports_quarters_then_the_summary() {
        let text = run_epoch(ProgressMode::Lines, 40);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        for (line, (pct, samples)) in lines.iter().zip([(" 25%", "100/400"), (" 50%", "200/400"), (" 75%", "300/400")])
        {
            assert!(line.starts_with("epoch 2/5") && line.contains(pct) && line.contains(samples), "{line}");
            assert!(line.contains("loss 0.5000  acc 75.00%"), "{line}");
        }
        assert_eq!(lines[3], format_summary(2, 5, &summary()));
        // Short epochs print only the summary.
        assert_eq!(run_epoch(ProgressMode::Lines, 3).lines().count(), 1);
    }

    #[test]
    fn bar_mode_with_a_writer_prints_the_summary() {
        assert_eq!(run_epoch(ProgressMode::Bar, 10), format!("{}\n", format_summary(2, 5, &summary())));
    }

    #[test]
    fn bar_template_parses() {
        assert!(ProgressStyle::with_template(BAR_TEMPLATE).is_ok());
    }

    #[test]
    fn auto_mode_is_silent_unless_verbose() {
        assert_eq!(ProgressMode::auto(false), ProgressMode::Silent);
        assert_ne!(ProgressMode::auto(true), ProgressMode::Silent);
    }
}
