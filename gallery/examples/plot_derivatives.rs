//! Draws `f(x) = sin(x) e^{−x²/4}` and its first three derivatives on
//! `[−4, 4]` to a PNG file. The derivatives come from one Taylor-mode
//! program of degree 3 (`optic_ad::Derivatives<U3>`), traced once and
//! evaluated at each of the 801 grid points; before drawing, every value
//! is checked against the closed forms.
//!
//! ```text
//! cargo run -p optic-ad-gallery --example plot_derivatives [-- out.png]
//! ```
//!
//! Without an argument the picture goes to `target/plot_derivatives.png`
//! of the workspace. The copy in the book is
//! `book/src/images/plot_derivatives.png`.

use std::path::PathBuf;
use std::process::ExitCode;

use optic_ad_gallery::{check, derivatives, draw, grid, INTERVAL, TOLERANCE};

fn run() -> Result<PathBuf, Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1);
    let path = match args.next() {
        Some(p) => PathBuf::from(p),
        None => {
            // Where the user looks: the target directory they chose, else
            // the current directory (not the clone's own `target/`).
            let dir = match std::env::var_os("CARGO_TARGET_DIR") {
                Some(d) => PathBuf::from(d),
                None => std::env::current_dir()?,
            };
            std::fs::create_dir_all(&dir)?;
            dir.join("plot_derivatives.png")
        }
    };
    if args.next().is_some() {
        return Err("usage: plot_derivatives [out.png]".into());
    }
    let xs = grid(INTERVAL.0, INTERVAL.1, 801);
    let values = derivatives(&xs)?;
    let dev = check(&xs, &values);
    println!(
        "{} points: largest deviation from the closed forms {dev:.1e} (bound {TOLERANCE:.0e})",
        xs.len()
    );
    if dev.is_nan() || dev > TOLERANCE {
        return Err(format!("derivatives differ from the closed forms by {dev:e}").into());
    }
    draw(&xs, &values, &path, (1000, 640))?;
    Ok(path)
}

fn main() -> ExitCode {
    match run() {
        Ok(path) => {
            println!("wrote {}", path.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
