//! A built-in digit dataset that needs no download: 28x28 grayscale digits 0-9, drawn
//! procedurally from strokes and rendered like MNIST (white on black, centered in a
//! 20-pixel box, values in `[0, 1]`).
//!
//! Each digit is a few strokes — line segments, elliptical arcs and quadratic curves — in a
//! unit box, with two or three styles per digit (a `1` with or without a flag and base, an
//! open or closed `4`, a `7` with a crossbar ...). Every sample moves the control points a
//! little, draws the strokes through a random linear map (rotation ±15°, shear, scale and
//! aspect), puts the ink's center of mass at the image center as MNIST does, give or take
//! 1.5 px, and renders them anti-aliased with a random pen width and ink level over
//! background noise. Classes are balanced; the set is a deterministic function of
//! `(n, seed)`.
//!
//! The task is learnable but not trivial, much like MNIST. Measured by this crate's tests
//! (4,000 training and 1,000 held-out samples, plain SGD, batch 32, lr 0.1, 5 epochs): a
//! 784-64-10 ReLU MLP reaches 96.4% held-out accuracy, a linear softmax classifier 93.9%.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rnn_core::{try_vec, Device, Result, Tensor};

use super::{Dataset, ImageShape};

/// Side of the square images, in pixels.
pub const IMAGE_SIZE: usize = 28;
/// Height of the box a digit is drawn into, as in MNIST (20 px inside a 28 px image).
const BOX: f64 = 20.0;
/// Half of the pen width in pixels, before the per-sample factor.
const HALF_PEN: f64 = 1.2;

type Point = (f64, f64);

/// One pen stroke in the unit box (x right, y down). Angles are in degrees, 0 pointing
/// right and 90 pointing down.
#[derive(Clone, Copy, Debug)]
enum Stroke {
    Line(Point, Point),
    Arc {
        center: Point,
        radii: Point,
        from: f64,
        to: f64,
    },
    /// Quadratic Bézier curve from the first point to the last, pulled toward the middle one.
    Curve(Point, Point, Point),
}

use Stroke::{Arc, Curve, Line};

fn arc(center: Point, radii: Point, from: f64, to: f64) -> Stroke {
    Arc { center, radii, from, to }
}

/// The strokes of `digit` in one of its styles (`style` is taken modulo the style count).
fn glyph(digit: u32, style: u32) -> Vec<Stroke> {
    match (digit, style % 3) {
        (0, _) => vec![arc((0.5, 0.5), (0.27, 0.41), -90.0, 270.0)],
        (1, 0) => vec![Line((0.52, 0.08), (0.5, 0.92))],
        (1, 1) => vec![Line((0.34, 0.24), (0.54, 0.08)), Line((0.54, 0.08), (0.5, 0.92))],
        (1, _) => {
            vec![Line((0.34, 0.24), (0.54, 0.08)), Line((0.54, 0.08), (0.5, 0.92)), Line((0.32, 0.92), (0.7, 0.92))]
        }
        (2, 0) => vec![
            arc((0.5, 0.32), (0.24, 0.22), 200.0, 380.0),
            Curve((0.73, 0.4), (0.55, 0.65), (0.24, 0.9)),
            Line((0.24, 0.9), (0.8, 0.9)),
        ],
        (2, _) => vec![
            arc((0.5, 0.3), (0.25, 0.2), 190.0, 370.0),
            Line((0.74, 0.37), (0.24, 0.9)),
            Line((0.24, 0.9), (0.8, 0.88)),
        ],
        (3, 0) | (3, 2) => {
            vec![arc((0.48, 0.3), (0.22, 0.2), 200.0, 450.0), arc((0.47, 0.69), (0.26, 0.22), -90.0, 155.0)]
        }
        (3, _) => vec![
            Line((0.25, 0.1), (0.72, 0.1)),
            Line((0.72, 0.1), (0.45, 0.42)),
            arc((0.48, 0.66), (0.26, 0.25), -120.0, 155.0),
        ],
        (4, 0) | (4, 2) => {
            vec![Line((0.62, 0.08), (0.2, 0.64)), Line((0.2, 0.64), (0.8, 0.64)), Line((0.62, 0.08), (0.62, 0.92))]
        }
        (4, _) => vec![Line((0.28, 0.1), (0.24, 0.6)), Line((0.24, 0.6), (0.78, 0.6)), Line((0.64, 0.3), (0.64, 0.92))],
        (5, _) => vec![
            Line((0.74, 0.1), (0.33, 0.1)),
            Line((0.33, 0.1), (0.3, 0.46)),
            arc((0.48, 0.66), (0.27, 0.25), -140.0, 150.0),
        ],
        (6, _) => vec![Curve((0.7, 0.1), (0.3, 0.25), (0.26, 0.66)), arc((0.5, 0.68), (0.24, 0.23), 180.0, 540.0)],
        (7, 0) => vec![Line((0.22, 0.1), (0.78, 0.1)), Line((0.78, 0.1), (0.42, 0.92))],
        (7, 1) => vec![Line((0.22, 0.1), (0.78, 0.1)), Line((0.78, 0.1), (0.42, 0.92)), Line((0.45, 0.5), (0.76, 0.5))],
        (7, _) => vec![Line((0.22, 0.1), (0.78, 0.1)), Curve((0.78, 0.1), (0.55, 0.45), (0.45, 0.92))],
        (8, _) => vec![arc((0.5, 0.29), (0.2, 0.2), -90.0, 270.0), arc((0.5, 0.7), (0.25, 0.22), -90.0, 270.0)],
        (9, 0) | (9, 2) => vec![arc((0.48, 0.32), (0.23, 0.22), 0.0, 360.0), Line((0.71, 0.32), (0.66, 0.92))],
        _ => vec![arc((0.48, 0.32), (0.23, 0.22), 0.0, 360.0), Curve((0.71, 0.32), (0.7, 0.75), (0.4, 0.9))],
    }
}

/// Moves every control point by up to ±0.035, radii by ±10% and arc ends by ±8°: the
/// variation of a hand drawing the same glyph twice.
fn jitter(stroke: Stroke, rng: &mut StdRng) -> Stroke {
    let mut p = |(x, y): Point| (x + rng.random_range(-0.035..0.035), y + rng.random_range(-0.035..0.035));
    match stroke {
        Line(a, b) => Line(p(a), p(b)),
        Curve(a, b, c) => Curve(p(a), p(b), p(c)),
        Arc { center, radii, from, to } => {
            let center = p(center);
            let radii = (radii.0 * rng.random_range(0.9..1.1), radii.1 * rng.random_range(0.9..1.1));
            arc(center, radii, from + rng.random_range(-8.0..8.0), to + rng.random_range(-8.0..8.0))
        }
    }
}

/// The stroke as a polyline.
fn polyline(stroke: Stroke) -> Vec<Point> {
    match stroke {
        Line(a, b) => vec![a, b],
        Curve(a, b, c) => (0..=12)
            .map(|i| {
                let t = i as f64 / 12.0;
                let (u, v, w) = ((1.0 - t) * (1.0 - t), 2.0 * t * (1.0 - t), t * t);
                (u * a.0 + v * b.0 + w * c.0, u * a.1 + v * b.1 + w * c.1)
            })
            .collect(),
        Arc { center, radii, from, to } => {
            let steps = (((to - from).abs() / 15.0).ceil() as usize).max(2);
            (0..=steps)
                .map(|i| {
                    let angle = (from + (to - from) * i as f64 / steps as f64).to_radians();
                    (center.0 + radii.0 * angle.cos(), center.1 + radii.1 * angle.sin())
                })
                .collect()
        }
    }
}

/// A random linear map from the unit box (centered at its middle) to pixel offsets:
/// rotation, shear and scale.
struct Affine {
    m: [[f64; 2]; 2],
}

impl Affine {
    fn random(rng: &mut StdRng) -> Affine {
        let angle = rng.random_range(-15.0f64..15.0).to_radians();
        let shear = rng.random_range(-0.2..0.2);
        let scale = BOX * rng.random_range(0.85..1.1);
        let (sx, sy) = (scale * rng.random_range(0.85..1.15), scale * rng.random_range(0.92..1.05));
        let (c, s) = (angle.cos(), angle.sin());
        // rotation · [[1, shear], [0, 1]] · diag(sx, sy)
        Affine { m: [[c * sx, (c * shear - s) * sy], [s * sx, (s * shear + c) * sy]] }
    }

    fn apply(&self, (x, y): Point) -> Point {
        let (x, y) = (x - 0.5, y - 0.5);
        (self.m[0][0] * x + self.m[0][1] * y, self.m[1][0] * x + self.m[1][1] * y)
    }
}

/// The centroid of the ink of some polylines (segment midpoints weighted by length).
fn ink_centroid(lines: &[Vec<Point>]) -> Point {
    let (mut total, mut cx, mut cy) = (0.0, 0.0, 0.0);
    for pair in lines.iter().flat_map(|line| line.windows(2)) {
        let (a, b) = (pair[0], pair[1]);
        let len = ((b.0 - a.0).powi(2) + (b.1 - a.1).powi(2)).sqrt();
        (total, cx, cy) = (total + len, cx + len * (a.0 + b.0) / 2.0, cy + len * (a.1 + b.1) / 2.0);
    }
    if total > 0.0 {
        (cx / total, cy / total)
    } else {
        (0.0, 0.0)
    }
}

/// Draws the segment a-b into `image` with a round pen of radius `half_width` pixels.
/// A pixel's coverage falls linearly from 1 to 0 over the pixel straddling the edge
/// (anti-aliasing); overlapping strokes keep the brighter value.
fn draw_segment(image: &mut [f32], a: Point, b: Point, half_width: f64, ink: f64) {
    let reach = half_width + 1.0;
    let clamp_px = |v: f64| v.clamp(0.0, (IMAGE_SIZE - 1) as f64) as usize;
    let (x0, x1) = (clamp_px(a.0.min(b.0) - reach), clamp_px(a.0.max(b.0) + reach));
    let (y0, y1) = (clamp_px(a.1.min(b.1) - reach), clamp_px(a.1.max(b.1) + reach));
    let (dx, dy) = (b.0 - a.0, b.1 - a.1);
    let len2 = dx * dx + dy * dy;
    for py in y0..=y1 {
        for px in x0..=x1 {
            let (cx, cy) = (px as f64 + 0.5, py as f64 + 0.5);
            let t = if len2 > 0.0 { (((cx - a.0) * dx + (cy - a.1) * dy) / len2).clamp(0.0, 1.0) } else { 0.0 };
            let dist = ((cx - a.0 - t * dx).powi(2) + (cy - a.1 - t * dy).powi(2)).sqrt();
            let coverage = (half_width + 0.5 - dist).clamp(0.0, 1.0) * ink;
            if let Some(pixel) = image.get_mut(py * IMAGE_SIZE + px) {
                *pixel = pixel.max(coverage as f32);
            }
        }
    }
}

/// One 28x28 image of `digit`, row-major.
fn render_digit(digit: u32, rng: &mut StdRng) -> Vec<f32> {
    let style = rng.random_range(0..3);
    let affine = Affine::random(rng);
    let half_width = HALF_PEN * rng.random_range(0.8..1.6);
    let ink = rng.random_range(0.75..1.0);
    let lines: Vec<Vec<Point>> = glyph(digit, style)
        .into_iter()
        .map(|stroke| polyline(jitter(stroke, rng)).into_iter().map(|p| affine.apply(p)).collect())
        .collect();
    // As in MNIST, the ink's center of mass goes to the image center; then a small shift.
    let centroid = ink_centroid(&lines);
    let center = IMAGE_SIZE as f64 / 2.0;
    let shift = (center - centroid.0 + rng.random_range(-1.5..1.5), center - centroid.1 + rng.random_range(-1.5..1.5));
    let mut image = vec![0.0f32; IMAGE_SIZE * IMAGE_SIZE];
    for pair in lines.iter().flat_map(|line| line.windows(2)) {
        let (a, b) = ((pair[0].0 + shift.0, pair[0].1 + shift.1), (pair[1].0 + shift.0, pair[1].1 + shift.1));
        draw_segment(&mut image, a, b, half_width, ink);
    }
    let noise = rng.random_range(0.0..0.25f32);
    for pixel in &mut image {
        *pixel = (*pixel + noise * rng.random_range(-1.0..1.0f32)).clamp(0.0, 1.0);
    }
    image
}

/// `n` procedurally drawn digits as a flat `[n, 784]` f32 dataset with balanced classes,
/// deterministic for a given `seed`. A count whose images do not fit in memory is
/// `Error::OutOfMemory` (3,136 bytes per image), not an abort.
///
/// ```
/// let digits = rnn_train::data::synthetic_digits(20, 7).unwrap();
/// assert_eq!(digits.inputs.dims(), &[20, 784]);
/// assert_eq!(digits.num_classes, 10);
/// ```
pub fn synthetic_digits(n: usize, seed: u64) -> Result<Dataset> {
    synthetic_digits_with_shape(n, seed, ImageShape::Flat)
}

/// Like [`synthetic_digits`], with images flat `[n, 784]` or `[n, 1, 28, 28]`.
pub fn synthetic_digits_with_shape(n: usize, seed: u64, shape: ImageShape) -> Result<Dataset> {
    let mut rng = StdRng::seed_from_u64(seed);
    // Balanced: class counts differ by at most one, in a shuffled order.
    // Both allocations are fallible: `n` often comes from a command line.
    let mut labels: Vec<u32> = try_vec(n)?;
    labels.extend((0..n).map(|i| (i % 10) as u32));
    labels.shuffle(&mut rng);
    let mut pixels = try_vec(n.saturating_mul(IMAGE_SIZE * IMAGE_SIZE))?;
    for &digit in &labels {
        pixels.extend(render_digit(digit, &mut rng));
    }
    let inputs = match shape {
        ImageShape::Flat => Tensor::from_vec(pixels, (n, IMAGE_SIZE * IMAGE_SIZE), Device::Cpu)?,
        ImageShape::Image => Tensor::from_vec(pixels, (n, 1, IMAGE_SIZE, IMAGE_SIZE), Device::Cpu)?,
    };
    let labels = Tensor::from_vec(labels, n, Device::Cpu)?;
    Dataset::new(inputs, labels, 10, "synthetic-digits")
}

/// A text picture of a square grayscale image (values in `[0, 1]`), one character per
/// pixel from `' '` (dark) to `'@'` (bright). A length that is not a square is drawn as
/// a single row.
pub fn render_ascii(image: &[f32]) -> String {
    const RAMP: &[u8] = b" .:-=+*#%@";
    let side = (image.len() as f64).sqrt().round() as usize;
    let width = if side * side == image.len() && side > 0 { side } else { image.len().max(1) };
    let mut out = String::with_capacity(image.len() + image.len() / width + 1);
    for row in image.chunks(width) {
        for &v in row {
            let level = if v.is_finite() { (v.clamp(0.0, 1.0) * (RAMP.len() - 1) as f32).round() as usize } else { 0 };
            out.push(RAMP[level.min(RAMP.len() - 1)] as char);
        }
        out.push('\n');
    }
    out
}
