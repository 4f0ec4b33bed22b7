//! Critical points of the Peng–Robinson equation of state, found by
//! Newton's method on conditions whose Jacobian needs fourth derivatives of
//! the Helmholtz energy.
//!
//! The model (D.-Y. Peng and D. B. Robinson, "A new two-constant equation
//! of state", Ind. Eng. Chem. Fundam. 15 (1976) 59–64) is given by its
//! molar Helmholtz energy, up to a function of `T` alone (which changes no
//! `V`-derivative):
//!
//! ```text
//! A(T, V) = −RT ln(V − b) − a α(T) / (2√2 b) · ln((V + (1 + √2) b) / (V + (1 − √2) b))
//! p = −∂A/∂V = RT/(V − b) − a α(T) / (V² + 2bV − b²)
//! α(T) = (1 + κ (1 − √(T/Tc)))²,  κ = 0.37464 + 1.54226 ω − 0.26992 ω²
//! a = Ωa R² Tc² / Pc,  b = Ωb R Tc / Pc
//! ```
//!
//! in SI units (K, Pa, m³/mol, J/mol), with `R = 8.314462618 J/(mol K)`
//! (CODATA 2018, exact since the 2019 SI). `Ωa` and `Ωb` are the exact
//! roots of the cubic that the critical conditions impose
//! ([`universal_constants`]), not the rounded 0.45724 and 0.07780, which
//! would move the critical point by about 1e-5.
//!
//! The critical point solves `F(T, V) = (∂²A/∂V², ∂³A/∂V³) = 0`
//! (`∂p/∂V = ∂²p/∂V² = 0`). Newton's method needs the Jacobian
//!
//! ```text
//! J = [[∂³A/∂V²∂T, ∂³A/∂V³], [∂⁴A/∂V³∂T, ∂⁴A/∂V⁴]],
//! ```
//!
//! fourth derivatives of `A`. All of them come from optic-ad: `A` is
//! written once, generic over `Real`; `∂/∂V` is a reverse-mode gradient
//! taken inside the traced code of the next level ([`d_dv`]), three levels
//! deep for `∂³A/∂V³`, and [`value_and_gradient`] of `∂²A/∂V²` and of
//! `∂³A/∂V³` gives `F` and the two rows of `J` ([`newton_system`]).
//!
//! The fluids are the six of `examples/data/critical_constants.csv` (Poling,
//! Prausnitz & O'Connell, "The Properties of Gases and Liquids", 5th ed.,
//! Appendix A), embedded at compile time.
//!
//! Run: `cargo run --release --example peng_robinson`.

use std::f64::consts::SQRT_2;
use std::fmt;
use std::process::ExitCode;

use optic_ad::{value_and_gradient, Differentiable, Real, Tracer};

/// The molar gas constant `R` in J/(mol K) (CODATA 2018; exact in the
/// 2019 SI: the Avogadro constant times the Boltzmann constant).
pub const R: f64 = 8.314462618;

/// Newton stops when `max(|ΔT|/T, |ΔV|/V)` falls below this.
pub const STEP_TOLERANCE: f64 = 1e-14;

/// Newton gives up after this many iterations.
pub const MAX_ITERATIONS: usize = 50;

/// The committed table of critical constants (name, Tc in K, Pc in bar,
/// acentric factor), embedded so that the example needs no path at run time.
pub const CRITICAL_CONSTANTS_CSV: &str = include_str!("data/critical_constants.csv");

/// One fluid of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Fluid {
    /// Its name.
    pub name: String,
    /// Critical temperature, K.
    pub tc: f64,
    /// Critical pressure, Pa.
    pub pc: f64,
    /// Acentric factor ω (dimensionless).
    pub omega: f64,
}

/// The constants every Peng–Robinson fluid shares, from the cubic of its
/// critical conditions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Universal {
    /// `η = b/Vc`, the real root of `3η³ + 3η² + 3η − 1 = 0`.
    pub eta: f64,
    /// `Zc = Pc Vc / (R Tc) = 1/(3 + η)`.
    pub zc: f64,
    /// `Ωb = b Pc / (R Tc) = η Zc`.
    pub omega_b: f64,
    /// `Ωa = a Pc / (R Tc)² = 3Zc² + 3Ωb² + 2Ωb`.
    pub omega_a: f64,
}

/// `η`, `Zc`, `Ωb` and `Ωa` in closed form, in plain f64 (no AD).
///
/// At the critical point the cubic in `Z = pV/(RT)`,
/// `Z³ − (1 − B) Z² + (A − 3B² − 2B) Z − (AB − B² − B³) = 0` with
/// `A = a p/(RT)²` and `B = b p/(RT)`, has the triple root `Zc`, so its
/// coefficients are those of `(Z − Zc)³`:
/// `1 − B = 3Zc`, `A − 3B² − 2B = 3Zc²`, `AB − B² − B³ = Zc³`. With
/// `η = B/Zc = b/Vc` the first gives `Zc = 1/(3 + η)`, and eliminating `A`
/// leaves `3η³ + 3η² + 3η − 1 = 0`; in `u = 1/η = Vc/b` it is
/// `u³ − 3u² − 3u − 3 = 0`, which `u = w + 1` depresses to
/// `w³ − 6w − 8 = 0`, whose one real root is, by Cardano's formula,
/// `w = ∛(4 + 2√2) + ∛(4 − 2√2)` (the book's chapter "Application:
/// critical points of the Peng–Robinson equation" writes the steps out).
pub fn universal_constants() -> Universal {
    let w = (4.0 + 2.0 * SQRT_2).cbrt() + (4.0 - 2.0 * SQRT_2).cbrt();
    let eta = 1.0 / (1.0 + w);
    let zc = 1.0 / (3.0 + eta);
    let omega_b = eta * zc;
    let omega_a = 3.0 * zc * zc + 3.0 * omega_b * omega_b + 2.0 * omega_b;
    Universal {
        eta,
        zc,
        omega_b,
        omega_a,
    }
}

/// The Peng–Robinson model of one fluid: its parameters in SI units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PengRobinson {
    /// `a = Ωa R² Tc² / Pc`, Pa m⁶/mol².
    pub a: f64,
    /// `b = Ωb R Tc / Pc`, m³/mol.
    pub b: f64,
    /// `κ = 0.37464 + 1.54226 ω − 0.26992 ω²`.
    pub kappa: f64,
    /// The table's `Tc`, K, which `α(T)` is reduced by.
    pub tc: f64,
}

impl PengRobinson {
    /// The model of `fluid` with the exact `Ωa`, `Ωb` of
    /// [`universal_constants`].
    pub fn new(fluid: &Fluid) -> Self {
        let u = universal_constants();
        Self::with_constants(fluid, u.omega_a, u.omega_b)
    }

    /// The model with given `Ωa`, `Ωb` (for example the rounded 0.45724,
    /// 0.07780 printed by Peng and Robinson).
    pub fn with_constants(fluid: &Fluid, omega_a: f64, omega_b: f64) -> Self {
        let w = fluid.omega;
        Self {
            a: omega_a * R * R * fluid.tc * fluid.tc / fluid.pc,
            b: omega_b * R * fluid.tc / fluid.pc,
            kappa: 0.37464 + 1.54226 * w - 0.26992 * w * w,
            tc: fluid.tc,
        }
    }

    /// `α(T) = (1 + κ (1 − √(T/Tc)))²`.
    pub fn alpha<T: Real>(&self, t: T) -> T {
        let s = (t / self.tc).sqrt() * (-self.kappa) + (1.0 + self.kappa);
        s * s
    }

    /// The molar Helmholtz energy `A(T, V)` in J/mol, up to a function of
    /// `T` alone; `T` in K, `V` in m³/mol, `V > b`.
    pub fn helmholtz<T: Real>(&self, t: T, v: T) -> T {
        let b = self.b;
        let repulsion = (v - b).ln() * t * (-R);
        let ratio = (v + (1.0 + SQRT_2) * b) / (v + (1.0 - SQRT_2) * b);
        let attraction = self.alpha(t) * ratio.ln() * (-self.a / (2.0 * SQRT_2 * b));
        repulsion + attraction
    }

    /// The van der Waals estimate of the critical point for this `a` and
    /// `b`: `T₀ = 8a/(27Rb)`, and `V₀ = 4b`. It knows nothing of the
    /// answer (about 1.74 Tc and 1.01 Vc for every fluid).
    pub fn start(&self) -> [f64; 2] {
        [8.0 * self.a / (27.0 * R * self.b), 4.0 * self.b]
    }
}

/// A thermodynamic state: the point every derivative below is taken at,
/// a structured point of the AD drivers (its gradient is a `State` too,
/// read as `.t` and `.v`).
#[derive(Debug, Clone, Copy, PartialEq, Differentiable)]
pub struct State<T> {
    /// Temperature, K.
    pub t: T,
    /// Molar volume, m³/mol.
    pub v: T,
}

/// `∂g/∂V` at `x = (T, V)` for a function `g` of the state written over
/// tracers: the `v` field of its reverse-mode gradient. `x` may hold
/// `f64` or tracers of an enclosing trace, so the call nests: `d_dv` of a
/// function that calls `d_dv` is a second derivative, recorded into the
/// outer trace as a program of its own.
///
/// `g` returns a `Result`, so an error inside it (of an inner `d_dv`)
/// leaves through `?` as this call's error.
///
/// # Errors
///
/// Those of `g` and of [`value_and_gradient`].
pub fn d_dv<T: Real>(
    g: impl FnMut(&State<Tracer>) -> optic_ad::Result<Tracer>,
    x: &State<T>,
) -> optic_ad::Result<T> {
    Ok(value_and_gradient(g, x)?.1.v)
}

/// `∂A/∂V = −p` at `x = (T, V)`.
///
/// # Errors
///
/// As [`value_and_gradient`].
pub fn a_v<T: Real>(eos: &PengRobinson, x: &State<T>) -> optic_ad::Result<T> {
    d_dv(|y| Ok(eos.helmholtz(y.t, y.v)), x)
}

/// `∂²A/∂V² = −∂p/∂V` at `x = (T, V)`: two nested gradients.
///
/// # Errors
///
/// As [`value_and_gradient`].
pub fn a_vv<T: Real>(eos: &PengRobinson, x: &State<T>) -> optic_ad::Result<T> {
    d_dv(|y| a_v(eos, y), x)
}

/// `∂³A/∂V³ = −∂²p/∂V²` at `x = (T, V)`: three nested gradients.
///
/// # Errors
///
/// As [`value_and_gradient`].
pub fn a_vvv<T: Real>(eos: &PengRobinson, x: &State<T>) -> optic_ad::Result<T> {
    d_dv(|y| a_vv(eos, y), x)
}

/// The Newton system at `(T, V)`: `F = (A_VV, A_VVV)` and its Jacobian
/// `J = [[A_VVT, A_VVV], [A_VVVT, A_VVVV]]` (subscripts are partial
/// derivatives), from one [`value_and_gradient`] of each entry of `F`: the
/// second row is a fourth derivative, four nested reverse passes.
///
/// # Errors
///
/// As [`value_and_gradient`].
pub fn newton_system(
    eos: &PengRobinson,
    t: f64,
    v: f64,
) -> optic_ad::Result<([f64; 2], [[f64; 2]; 2])> {
    let x = State { t, v };
    let (f0, row0) = value_and_gradient(|x| a_vv(eos, x), &x)?;
    let (f1, row1) = value_and_gradient(|x| a_vvv(eos, x), &x)?;
    Ok(([f0, f1], [[row0.t, row0.v], [row1.t, row1.v]]))
}

/// A critical point found by [`critical_point`].
#[derive(Debug, Clone, PartialEq)]
pub struct CriticalPoint {
    /// Critical temperature, K.
    pub t: f64,
    /// Critical molar volume, m³/mol.
    pub v: f64,
    /// Critical pressure `p = −∂A/∂V`, Pa.
    pub p: f64,
    /// Newton iterations taken.
    pub iterations: usize,
    /// The relative size `max(|ΔT|/T, |ΔV|/V)` of each Newton step.
    pub steps: Vec<f64>,
}

impl CriticalPoint {
    /// The critical compressibility factor `Zc = p V / (R T)`.
    pub fn zc(&self) -> f64 {
        self.p * self.v / (R * self.t)
    }
}

/// Why the example failed.
#[derive(Debug, Clone, PartialEq)]
pub enum PrError {
    /// An error from the AD library.
    Ad(optic_ad::Error),
    /// A line of the table is malformed.
    Data {
        /// Line number, from 1.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The start is outside the model's domain (`T > 0`, `V > b`).
    BadStart {
        /// The start `[T, V]`.
        start: [f64; 2],
    },
    /// Newton's Jacobian is singular or not finite.
    Singular {
        /// Iteration number, from 1.
        iteration: usize,
    },
    /// A Newton step left the domain, or the iterate is not finite.
    LeftDomain {
        /// Iteration number, from 1.
        iteration: usize,
        /// The iterate `[T, V]`.
        at: [f64; 2],
    },
    /// No convergence within [`MAX_ITERATIONS`].
    NotConverged {
        /// The relative size of the last step.
        last_step: f64,
    },
}

impl From<optic_ad::Error> for PrError {
    fn from(e: optic_ad::Error) -> Self {
        PrError::Ad(e)
    }
}

impl fmt::Display for PrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrError::Ad(e) => write!(f, "automatic differentiation failed: {e}"),
            PrError::Data { line, message } => {
                write!(f, "critical_constants.csv line {line}: {message}")
            }
            PrError::BadStart { start } => write!(
                f,
                "Newton start T = {} K, V = {} m³/mol is outside the domain T > 0, V > b",
                start[0], start[1]
            ),
            PrError::Singular { iteration } => {
                write!(f, "Newton's Jacobian is singular at iteration {iteration}")
            }
            PrError::LeftDomain { iteration, at } => write!(
                f,
                "Newton iteration {iteration} left the domain: T = {} K, V = {} m³/mol",
                at[0], at[1]
            ),
            PrError::NotConverged { last_step } => write!(
                f,
                "Newton did not converge in {MAX_ITERATIONS} iterations (last relative step {last_step:.3e})"
            ),
        }
    }
}

impl std::error::Error for PrError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PrError::Ad(e) => Some(e),
            _ => None,
        }
    }
}

/// The fluids of a table in the format of `critical_constants.csv`:
/// `#` comment lines, a header `name,Tc_K,Pc_bar,omega`, then one fluid a
/// line. `Pc` is converted from bar to Pa.
///
/// # Errors
///
/// [`PrError::Data`] for a missing or wrong header, a line without four
/// fields, a number that does not parse, `Tc` or `Pc` not positive and
/// finite, or `ω` not finite.
pub fn parse_fluids(csv: &str) -> Result<Vec<Fluid>, PrError> {
    let mut lines = csv
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'));
    let err = |line, message: String| PrError::Data { line, message };
    match lines.next() {
        Some((_, "name,Tc_K,Pc_bar,omega")) => {}
        Some((n, l)) => {
            return Err(err(
                n,
                format!("expected the header name,Tc_K,Pc_bar,omega, found {l:?}"),
            ))
        }
        None => return Err(err(0, "no header and no data".into())),
    }
    let mut fluids = Vec::new();
    for (n, l) in lines {
        let fields: Vec<&str> = l.split(',').map(str::trim).collect();
        let [name, tc, pc, omega] = fields[..] else {
            return Err(err(n, format!("expected 4 fields, found {}", fields.len())));
        };
        let num = |s: &str, what: &str| {
            s.parse::<f64>()
                .map_err(|e| err(n, format!("{what} {s:?}: {e}")))
        };
        let (tc, pc_bar, omega) = (num(tc, "Tc")?, num(pc, "Pc")?, num(omega, "omega")?);
        if !(tc.is_finite() && tc > 0.0 && pc_bar.is_finite() && pc_bar > 0.0 && omega.is_finite())
        {
            return Err(err(
                n,
                format!("Tc = {tc}, Pc = {pc_bar}: need Tc, Pc > 0 and finite ω = {omega}"),
            ));
        }
        fluids.push(Fluid {
            name: name.to_string(),
            tc,
            pc: pc_bar * 1e5,
            omega,
        });
    }
    if fluids.is_empty() {
        return Err(err(0, "no fluids".into()));
    }
    Ok(fluids)
}

/// Newton's method on `(A_VV, A_VVV) = 0` from `start = [T₀, V₀]`, until
/// the relative step is below [`STEP_TOLERANCE`].
///
/// # Errors
///
/// [`PrError::BadStart`], [`PrError::Singular`], [`PrError::LeftDomain`],
/// [`PrError::NotConverged`] after [`MAX_ITERATIONS`], or [`PrError::Ad`].
pub fn critical_point(eos: &PengRobinson, start: [f64; 2]) -> Result<CriticalPoint, PrError> {
    let [mut t, mut v] = start;
    if !(t.is_finite() && v.is_finite() && t > 0.0 && v > eos.b) {
        return Err(PrError::BadStart { start });
    }
    let mut steps = Vec::new();
    for iteration in 1..=MAX_ITERATIONS {
        let (f, j) = newton_system(eos, t, v)?;
        let det = j[0][0] * j[1][1] - j[0][1] * j[1][0];
        if det == 0.0 || !det.is_finite() {
            return Err(PrError::Singular { iteration });
        }
        // J (ΔT, ΔV) = −F by Cramer's rule.
        let dt = -(f[0] * j[1][1] - j[0][1] * f[1]) / det;
        let dv = -(j[0][0] * f[1] - j[1][0] * f[0]) / det;
        t += dt;
        v += dv;
        if !(t.is_finite() && v.is_finite() && t > 0.0 && v > eos.b) {
            return Err(PrError::LeftDomain {
                iteration,
                at: [t, v],
            });
        }
        let step = (dt / t).abs().max((dv / v).abs());
        steps.push(step);
        if step < STEP_TOLERANCE {
            let p = -a_v(eos, &State { t, v })?;
            return Ok(CriticalPoint {
                t,
                v,
                p,
                iterations: iteration,
                steps,
            });
        }
    }
    Err(PrError::NotConverged {
        last_step: steps.last().copied().unwrap_or(f64::NAN),
    })
}

/// One fluid's result.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The fluid, as in the table.
    pub fluid: Fluid,
    /// Its model.
    pub eos: PengRobinson,
    /// The critical point found.
    pub found: CriticalPoint,
}

impl Row {
    /// `|Tc found − Tc table| / Tc table`.
    pub fn tc_rel_err(&self) -> f64 {
        ((self.found.t - self.fluid.tc) / self.fluid.tc).abs()
    }

    /// `|Pc found − Pc table| / Pc table`.
    pub fn pc_rel_err(&self) -> f64 {
        ((self.found.p - self.fluid.pc) / self.fluid.pc).abs()
    }
}

/// The critical point of every fluid of the embedded table, each from its
/// van der Waals start ([`PengRobinson::start`]).
///
/// # Errors
///
/// As [`parse_fluids`] and [`critical_point`].
pub fn run() -> Result<Vec<Row>, PrError> {
    parse_fluids(CRITICAL_CONSTANTS_CSV)?
        .into_iter()
        .map(|fluid| {
            let eos = PengRobinson::new(&fluid);
            let found = critical_point(&eos, eos.start())?;
            Ok(Row { fluid, eos, found })
        })
        .collect()
}

fn print_table(rows: &[Row]) {
    let u = universal_constants();
    println!("Peng–Robinson critical points: Newton on (∂²A/∂V², ∂³A/∂V³) = 0, Jacobian from 4th derivatives of A");
    println!(
        "exact constants: η = b/Vc = {:.15}, Zc = {:.15}, Ωb = {:.15}, Ωa = {:.15}",
        u.eta, u.zc, u.omega_b, u.omega_a
    );
    println!();
    println!(
        "{:<15} {:>9} {:>16} {:>8} {:>9} {:>16} {:>8} {:>17} {:>5}",
        "fluid",
        "Tc table",
        "Tc found [K]",
        "rel err",
        "Pc table",
        "Pc found [bar]",
        "rel err",
        "Zc",
        "iter"
    );
    for r in rows {
        println!(
            "{:<15} {:>9.2} {:>16.10} {:>8.1e} {:>9.2} {:>16.11} {:>8.1e} {:>17.15} {:>5}",
            r.fluid.name,
            r.fluid.tc,
            r.found.t,
            r.tc_rel_err(),
            r.fluid.pc / 1e5,
            r.found.p / 1e5,
            r.pc_rel_err(),
            r.found.zc(),
            r.found.iterations
        );
    }
    println!();
    println!("relative Newton steps max(|ΔT|/T, |ΔV|/V), from T₀ = 8a/(27Rb), V₀ = 4b:");
    for r in rows {
        let steps: Vec<String> = r.found.steps.iter().map(|s| format!("{s:.1e}")).collect();
        println!("{:<15} {}", r.fluid.name, steps.join(" "));
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(rows) => {
            print_table(&rows);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
