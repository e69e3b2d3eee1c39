//! Training-curve plots.

use std::collections::HashMap;
use std::path::PathBuf;

use rnn_core::{Error, Result};
use rnn_train::plot::{plot_history, render_history_svg};
use rnn_train::History;

/// A file name in the system temp dir, unique to this process.
fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("rnn-train-plot-{}-{name}", std::process::id()))
}

fn history(epochs: usize, with_accuracy: bool) -> History {
    let curve = |start: f64, rate: f64| -> Vec<f64> { (0..epochs).map(|e| start * rate.powi(e as i32)).collect() };
    let mut h = History {
        train_loss: curve(2.0, 0.7),
        val_loss: curve(2.2, 0.75),
        epoch_times: vec![1.0; epochs],
        ..Default::default()
    };
    if with_accuracy {
        let acc: Vec<f64> = curve(0.5, 0.8).iter().map(|gap| 1.0 - gap).collect();
        h.train_metrics = HashMap::from([("accuracy".to_string(), acc.clone())]);
        h.val_metrics = HashMap::from([("accuracy".to_string(), acc.iter().map(|a| a - 0.02).collect())]);
    }
    h
}

/// Checks that `svg` looks like one well-formed SVG document.
fn check_svg(svg: &str) {
    assert!(svg.trim_start().starts_with("<svg") && svg.trim_end().ends_with("</svg>"), "not an SVG document");
    assert_eq!(svg.matches("<svg").count(), 1);
    assert_eq!(svg.matches('<').count(), svg.matches('>').count());
}

/// The points of every thick polyline (the data curves and their legend marks), as
/// (stroke color, [(x, y)]) in pixels.
fn curves(svg: &str) -> Vec<(String, Vec<(f64, f64)>)> {
    let attr = |line: &str, name: &str| -> Option<String> {
        let start = line.find(&format!("{name}=\""))? + name.len() + 2;
        Some(line[start..].split('"').next()?.to_string())
    };
    svg.lines()
        .filter(|l| l.starts_with("<polyline") && l.contains(r#"stroke-width="2""#))
        .map(|l| {
            let points = attr(l, "points").unwrap_or_default();
            let parsed = points
                .split_whitespace()
                .filter_map(|p| p.split_once(','))
                .map(|(x, y)| (x.parse().unwrap_or(f64::NAN), y.parse().unwrap_or(f64::NAN)))
                .collect();
            (attr(l, "stroke").unwrap_or_default(), parsed)
        })
        .collect()
}

#[test]
fn writes_loss_and_accuracy_panels() -> Result<()> {
    let path = temp_path("curves.svg");
    plot_history(&history(12, true), &path)?;
    let svg = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    let _ = std::fs::remove_file(&path);
    check_svg(&svg);
    for text in ["Loss", "Accuracy", "train loss", "val loss", "train accuracy", "val accuracy", "epoch", "\n12\n"] {
        assert!(svg.contains(text), "missing {text:?}");
    }
    // Four curves of 12 points (train/val loss, train/val accuracy) plus four legend marks.
    let curves = curves(&svg);
    let data: Vec<&Vec<(f64, f64)>> = curves.iter().map(|(_, pts)| pts).filter(|pts| pts.len() == 12).collect();
    assert_eq!((data.len(), curves.len()), (4, 8), "{curves:?}");
    // Epochs go left to right; falling losses go down the picture (SVG y grows downward)
    // and rising accuracies go up.
    for pts in &data {
        assert!(pts.windows(2).all(|w| w[1].0 > w[0].0), "{pts:?}");
    }
    let (loss, acc) = (data[0], data[2]);
    assert!(loss.windows(2).all(|w| w[1].1 >= w[0].1), "{loss:?}");
    assert!(acc.windows(2).all(|w| w[1].1 <= w[0].1), "{acc:?}");
    // One dot per epoch and series.
    assert_eq!(svg.matches("<circle").count(), 4 * 12);
    Ok(())
}

#[test]
fn the_series_values_shape_the_curves() -> Result<()> {
    // Different losses give different pictures: the plot is drawn from the data.
    let a = render_history_svg(&history(5, false))?;
    let mut other = history(5, false);
    other.train_loss.reverse();
    let b = render_history_svg(&other)?;
    assert_ne!(a, b);
    assert!(!a.contains("accuracy"), "no accuracy panel without the metric");
    assert_eq!(a.matches("<circle").count(), 2 * 5);
    Ok(())
}

#[test]
fn one_epoch_and_missing_validation_work() -> Result<()> {
    let mut h = history(1, true);
    h.val_loss.clear();
    h.val_metrics.clear();
    let svg = render_history_svg(&h)?;
    check_svg(&svg);
    assert!(svg.contains("train loss") && !svg.contains("val loss"));
    assert_eq!(svg.matches("<circle").count(), 2, "one dot per curve");
    // A diverged loss (NaN, inf) is skipped rather than breaking the axes.
    let mut diverged = history(4, false);
    diverged.train_loss[2] = f64::NAN;
    diverged.train_loss[3] = f64::INFINITY;
    let svg = render_history_svg(&diverged)?;
    assert!(!svg.contains("NaN") && !svg.contains("inf"));
    Ok(())
}

#[test]
fn errors_are_clear() {
    let err = render_history_svg(&History::default()).unwrap_err();
    assert!(err.to_string().contains("no epochs"), "{err}");
    for name in ["curves.png", "curves", "curves.txt"] {
        let err = plot_history(&history(3, true), &temp_path(name)).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }) && err.to_string().contains(".svg"), "{err}");
        assert!(!temp_path(name).exists());
    }
    let missing_dir = std::env::temp_dir().join("rnn-train-plot-no-such-dir").join("x.svg");
    assert!(matches!(plot_history(&history(2, false), &missing_dir), Err(Error::Io { .. })));
}
