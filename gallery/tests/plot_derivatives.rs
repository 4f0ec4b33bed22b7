//! The plotted values: Taylor mode against the closed forms, the closed
//! forms against finite differences, and the picture is a PNG of the
//! requested size.

use approx::assert_relative_eq;
use optic_ad_gallery::{check, closed_form, derivatives, draw, f, grid, INTERVAL, TOLERANCE};

#[test]
fn taylor_mode_matches_the_closed_forms_on_the_plotted_grid() {
    let xs = grid(INTERVAL.0, INTERVAL.1, 801);
    assert_eq!((xs[0], xs[800]), INTERVAL);
    let values = derivatives(&xs).unwrap();
    let dev = check(&xs, &values);
    println!("largest deviation {dev:.2e}");
    assert!(dev <= TOLERANCE, "{dev:e}");
    // The values are those of f itself at order 0.
    for (&x, v) in xs.iter().zip(&values) {
        assert_relative_eq!(v[0], f(x), max_relative = 1e-15);
    }
}

/// `check` can fail: a derivative off by one part in 10¹² is caught, and
/// so is a NaN.
#[test]
fn the_check_detects_wrong_values() {
    let xs = grid(INTERVAL.0, INTERVAL.1, 81);
    let mut values = derivatives(&xs).unwrap();
    values[40][3] *= 1.0 + 1e-12;
    values[40][3] += 1e-12;
    assert!(check(&xs, &values) > TOLERANCE);
    let mut values = derivatives(&xs).unwrap();
    values[7][2] = f64::NAN;
    assert!(check(&xs, &values).is_nan());
}

/// The hand-derived closed forms, each against central differences of the
/// one below: with step `h = 10⁻⁴` the error is `h²/6 · |f⁽ᵏ⁺²⁾| ≤ 2·10⁻⁸`
/// (the derivatives of `f` are below 10 on the interval) plus the
/// rounding `ε/h ≈ 2·10⁻¹²`, so 10⁻⁷ is a safe bound; a wrong term is of
/// order 1.
#[test]
fn closed_forms_match_finite_differences() {
    let h = 1e-4;
    for x in grid(INTERVAL.0, INTERVAL.1, 161) {
        let (lo, mid, hi) = (closed_form(x - h), closed_form(x), closed_form(x + h));
        assert_relative_eq!(mid[0], f(x), max_relative = 1e-15);
        for k in 0..3 {
            let fd = (hi[k] - lo[k]) / (2.0 * h);
            assert!(
                (fd - mid[k + 1]).abs() <= 1e-7,
                "x = {x}, order {}: {fd} vs {}",
                k + 1,
                mid[k + 1]
            );
        }
    }
}

#[test]
fn the_picture_is_a_png_of_the_requested_size() {
    let xs = grid(INTERVAL.0, INTERVAL.1, 201);
    let values = derivatives(&xs).unwrap();
    let path =
        std::env::temp_dir().join(format!("optic_ad_gallery_test_{}.png", std::process::id()));
    draw(&xs, &values, &path, (400, 300)).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    // The first chunk is IHDR: width and height, big-endian.
    assert_eq!(&bytes[12..16], b"IHDR");
    let width = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    assert_eq!((width, height), (400, 300));
}

#[test]
fn an_unwritable_path_is_an_error() {
    let xs = grid(INTERVAL.0, INTERVAL.1, 11);
    let values = derivatives(&xs).unwrap();
    let path = std::env::temp_dir().join("optic_ad_gallery_no_such_dir/x/plot.png");
    assert!(draw(&xs, &values, &path, (200, 100)).is_err());
}
