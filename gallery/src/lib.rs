//! Pictures of derivatives computed by optic-ad, drawn with `plotters`.
//!
//! This crate is a member of optic-ad's workspace that is never published:
//! it keeps the drawing library out of optic-ad's dependencies and out of
//! the builds of its examples and tests. Text is drawn with the DejaVu Sans
//! font embedded from `fonts/` (see `fonts/LICENSE-DejaVu.txt`), so no
//! system font library is needed.
//!
//! [`derivatives`] samples `f, f′, f″, f‴` of [`f`] on a grid with one
//! compiled Taylor-mode program ([`optic_ad::Derivatives`]), [`check`]
//! compares them with the closed forms of [`closed_form`], and [`draw`]
//! plots them to a PNG file.

use std::error::Error;
use std::path::Path;
use std::sync::Once;

use optic_ad::typenum::U3;
use optic_ad::{Derivatives, Real};
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

/// The plotted function, `f(x) = sin(x) e^{−x²/4}`: a wave under a
/// Gaussian envelope, whose derivatives grow polynomial factors
/// (`f‴` has `x³`).
pub fn f<T: Real>(x: T) -> T {
    x.sin() * (-(x * x) * 0.25).exp()
}

/// The interval of the picture.
pub const INTERVAL: (f64, f64) = (-4.0, 4.0);

/// `[f, f′, f″, f‴]` at `x`, by hand. With `s = sin x`, `c = cos x` and
/// `g = e^{−x²/4}`, whose derivatives are
///
/// ```text
/// g′ = −(x/2) g,   g″ = (x²/4 − 1/2) g,   g‴ = (3x/4 − x³/8) g,
/// ```
///
/// Leibniz's rule for `f = s g` gives
///
/// ```text
/// f′ = c g + s g′
/// f″ = −s g + 2c g′ + s g″
/// f‴ = −c g − 3s g′ + 3c g″ + s g‴.
/// ```
pub fn closed_form(x: f64) -> [f64; 4] {
    let (s, c) = x.sin_cos();
    let g = (-x * x / 4.0).exp();
    let g1 = -x / 2.0 * g;
    let g2 = (x * x / 4.0 - 0.5) * g;
    let g3 = (3.0 * x / 4.0 - x * x * x / 8.0) * g;
    [
        s * g,
        c * g + s * g1,
        -s * g + 2.0 * c * g1 + s * g2,
        -c * g - 3.0 * s * g1 + 3.0 * c * g2 + s * g3,
    ]
}

/// The grid `a, a + h, …, b` with `n ≥ 2` points.
pub fn grid(a: f64, b: f64, n: usize) -> Vec<f64> {
    let h = (b - a) / (n - 1).max(1) as f64;
    (0..n).map(|i| a + h * i as f64).collect()
}

/// `[f, f′, f″, f‴]` of [`f`] at every point of `xs`: `f` is traced once
/// (at the first point) into a Taylor program of degree 3, which is then
/// evaluated at each point.
///
/// # Errors
///
/// Errors of optic-ad (tracing, or evaluating the program).
pub fn derivatives(xs: &[f64]) -> optic_ad::Result<Vec<[f64; 4]>> {
    let x0 = xs.first().copied().unwrap_or(0.0);
    let mut d = Derivatives::<U3, _>::new(f, x0)?;
    xs.iter()
        .map(|&x| {
            let v = d.eval(x)?;
            Ok([v[0], v[1], v[2], v[3]])
        })
        .collect()
}

/// The largest deviation of `values` (from [`derivatives`]) from
/// [`closed_form`] at `xs`, measured as `|got − want| / (1 + |want|)`
/// (NaN if any value is NaN).
///
/// On `[−4, 4]` every term of the closed forms is below 10 in size and
/// each value is about 30 rounded operations, so both sides are good to a
/// few hundred ulps of 10: a deviation above [`TOLERANCE`] is an error,
/// not rounding.
pub fn check(xs: &[f64], values: &[[f64; 4]]) -> f64 {
    xs.iter()
        .zip(values)
        .flat_map(|(&x, got)| {
            let want = closed_form(x);
            (0..4).map(move |k| (got[k] - want[k]).abs() / (1.0 + want[k].abs()))
        })
        // Unlike `f64::max`, keeps a NaN: a NaN value is a failure.
        .fold(0.0, |m, e| if e.is_nan() || e > m { e } else { m })
}

/// The bound [`check`] must stay below.
pub const TOLERANCE: f64 = 1e-13;

/// Registers the embedded DejaVu Sans as plotters' `sans-serif`, once.
fn register_fonts() -> Result<(), Box<dyn Error>> {
    static FONT: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");
    static ONCE: Once = Once::new();
    let mut ok = true;
    ONCE.call_once(|| ok = register_font("sans-serif", FontStyle::Normal, FONT).is_ok());
    if ok {
        Ok(())
    } else {
        Err("the embedded DejaVu Sans font could not be read".into())
    }
}

/// Names and colours of the four curves.
const CURVES: [(&str, RGBColor); 4] = [
    ("f(x)", RGBColor(31, 119, 180)),
    ("f′(x)", RGBColor(255, 127, 14)),
    ("f″(x)", RGBColor(44, 160, 44)),
    ("f‴(x)", RGBColor(214, 39, 40)),
];

/// Draws the four curves `values[i][k]` over `xs` to a PNG file of
/// `size` pixels at `path`, with a title, axis labels and a legend.
///
/// # Errors
///
/// If the font cannot be registered, or plotters fails (typically: the
/// file cannot be written).
pub fn draw(
    xs: &[f64],
    values: &[[f64; 4]],
    path: &Path,
    size: (u32, u32),
) -> Result<(), Box<dyn Error>> {
    register_fonts()?;
    let (lo, hi) = values
        .iter()
        .flatten()
        .fold((0.0_f64, 0.0_f64), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let pad = 0.08 * (hi - lo);
    let (a, b) = (
        xs.first().copied().unwrap_or(0.0),
        xs.last().copied().unwrap_or(1.0),
    );

    let root = BitMapBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "f(x) = sin(x)·exp(−x²/4) and its derivatives (Taylor mode, Derivatives<U3>)",
            ("sans-serif", 22),
        )
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(a..b, (lo - pad)..(hi + pad))?;
    chart
        .configure_mesh()
        .x_desc("x")
        .y_desc("value")
        .axis_desc_style(("sans-serif", 18))
        .label_style(("sans-serif", 15))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()?;
    for (k, &(name, color)) in CURVES.iter().enumerate() {
        chart
            .draw_series(LineSeries::new(
                xs.iter().zip(values).map(|(&x, v)| (x, v[k])),
                color.stroke_width(2),
            ))?
            .label(name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(3))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .label_font(("sans-serif", 17))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
