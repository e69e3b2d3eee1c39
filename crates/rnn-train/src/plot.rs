//! Training curves: loss and accuracy per epoch from a [`History`], drawn as an SVG image.
//!
//! SVG keeps text as `<text>` elements that the viewer renders, so drawing needs no font
//! files on the machine that trains.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use rnn_core::{Error, Result};

use crate::History;

const OP: &str = "plot_history";
const PANEL_SIZE: (u32, u32) = (560, 400);
const TRAIN_COLOR: RGBColor = RGBColor(31, 119, 180);
const VAL_COLOR: RGBColor = RGBColor(255, 127, 14);

/// One curve of a panel.
struct Series<'a> {
    label: &'a str,
    values: Vec<f64>,
    color: RGBColor,
}

/// Writes the loss curves (train, and validation when recorded) and, when an `"accuracy"`
/// metric was recorded, the accuracy curves, side by side, against the epoch.
/// The format comes from the extension; `.svg` is supported.
pub fn plot_history(history: &History, path: &Path) -> Result<()> {
    let ext = path.extension().map(|e| e.to_string_lossy().to_ascii_lowercase());
    match ext.as_deref() {
        Some("svg") => {
            let svg = render_history_svg(history)?;
            crate::atomic_file::write_atomic(path, svg.as_bytes())
        }
        other => {
            let found = other.map(|e| format!("'.{e}'")).unwrap_or_else(|| "no extension".to_string());
            Err(Error::invalid(
                OP,
                format!("cannot write {}: {found} is not a supported format (use .svg)", path.display()),
            ))
        }
    }
}

/// The training curves of `history` as an SVG document.
pub fn render_history_svg(history: &History) -> Result<String> {
    if history.epochs() == 0 {
        return Err(Error::invalid(OP, "the history has no epochs to plot"));
    }
    let loss = vec![
        Series { label: "train loss", values: history.train_loss.clone(), color: TRAIN_COLOR },
        Series { label: "val loss", values: history.val_loss.clone(), color: VAL_COLOR },
    ];
    let percent = |values: Option<&Vec<f64>>| values.map(|v| v.iter().map(|a| a * 100.0).collect::<Vec<f64>>());
    let accuracy: Vec<Series> = [
        ("train accuracy", percent(history.train_metrics.get("accuracy")), TRAIN_COLOR),
        ("val accuracy", percent(history.val_metrics.get("accuracy")), VAL_COLOR),
    ]
    .into_iter()
    .filter_map(|(label, values, color)| values.map(|values| Series { label, values, color }))
    .collect();

    let panels = if accuracy.is_empty() { 1 } else { 2 };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (PANEL_SIZE.0 * panels, PANEL_SIZE.1)).into_drawing_area();
        root.fill(&WHITE).map_err(drawing_error)?;
        let areas = root.split_evenly((1, panels as usize));
        let epochs = history.epochs();
        // Legends sit where the curves usually are not: losses fall, accuracies rise.
        draw_panel(&areas[0], ("Loss", "loss"), &loss, epochs, SeriesLabelPosition::UpperRight)?;
        if let Some(area) = areas.get(1) {
            draw_panel(area, ("Accuracy", "accuracy (%)"), &accuracy, epochs, SeriesLabelPosition::LowerRight)?;
        }
        root.present().map_err(drawing_error)?;
    }
    Ok(svg)
}

/// One chart: each non-empty series as a line with a dot per epoch, and a legend.
/// Non-finite values (a diverged loss) are left out.
fn draw_panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    (title, y_desc): (&str, &str),
    series: &[Series<'_>],
    epochs: usize,
    legend: SeriesLabelPosition,
) -> Result<()> {
    let points: Vec<Vec<(f64, f64)>> = series
        .iter()
        .map(|s| {
            s.values.iter().enumerate().filter(|(_, v)| v.is_finite()).map(|(i, &v)| ((i + 1) as f64, v)).collect()
        })
        .collect();
    let (y_lo, y_hi) = padded_range(points.iter().flatten().map(|p| p.1));
    let x_hi = epochs.max(1) as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.5..x_hi + 0.5, y_lo..y_hi)
        .map_err(drawing_error)?;
    let whole = |x: &f64| if (x - x.round()).abs() < 1e-6 { format!("{:.0}", x) } else { String::new() };
    chart
        .configure_mesh()
        .x_desc("epoch")
        .y_desc(y_desc)
        .x_labels(epochs.clamp(2, 11))
        .x_label_formatter(&whole)
        .bold_line_style(BLACK.mix(0.12))
        .light_line_style(BLACK.mix(0.04))
        .draw()
        .map_err(drawing_error)?;
    for (s, pts) in series.iter().zip(&points).filter(|(_, pts)| !pts.is_empty()) {
        let color = s.color;
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(drawing_error)?
            .label(s.label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
        chart.draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled()))).map_err(drawing_error)?;
    }
    chart
        .configure_series_labels()
        .position(legend)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(drawing_error)?;
    Ok(())
}

/// The span of `values` with 5% room on each side; a constant or missing series still
/// gets a range of non-zero height.
fn padded_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if lo > hi {
        return (0.0, 1.0);
    }
    let pad = if hi > lo { (hi - lo) * 0.05 } else { (hi.abs() * 0.05).max(0.05) };
    (lo - pad, hi + pad)
}

fn drawing_error<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> Error {
    Error::Msg(format!("{OP}: drawing failed: {e}"))
}
