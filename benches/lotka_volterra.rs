//! The loop benchmark's problem: Lotka–Volterra integrated by RK4 for
//! `steps` steps of `h = 10/steps`, written once over [`Real`] with
//! [`fold`]; the loss is the squared distance of the final state to
//! `(1, 1)`, the point the six parameters `(α, β, γ, δ, x₀, y₀)`.

use optic_ad::array::{Array, TArray, TScalar};
use optic_ad::{fold_with, Checkpoints, Real, Result};

/// The point.
pub const P0: [f64; 6] = [0.55, 0.028, 0.84, 0.026, 33.0, 6.0];
/// The direction of the Hessian-vector products.
pub const V: [f64; 6] = [0.01, -0.002, 0.03, 0.001, -0.5, 0.25];

/// The loss, generic over the scalar (`fold`'s default checkpointing).
pub fn loss<T: Real>(p: &[T], steps: usize) -> Result<T> {
    loss_with(p, steps, Checkpoints::Auto)
}

/// The loss with the gradient's residual chosen by `c`.
pub fn loss_with<T: Real>(p: &[T], steps: usize, c: Checkpoints) -> Result<T> {
    let [x, y] = final_state_with(p, steps, c)?;
    Ok((x - 1.0) * (x - 1.0) + (y - 1.0) * (y - 1.0))
}

/// The state `(x, y)` at `t = 10`: `steps` RK4 steps of `h = 10/steps`
/// from `(x₀, y₀)`, the gradient's residual chosen by `c`.
pub fn final_state_with<T: Real>(p: &[T], steps: usize, c: Checkpoints) -> Result<[T; 2]> {
    let h = 10.0 / steps as f64;
    let rhs = |x: T, y: T| (p[0] * x - p[1] * x * y, p[3] * x * y - p[2] * y);
    fold_with(steps, [p[4], p[5]], c, |[x, y]: [T; 2]| {
        let (k1x, k1y) = rhs(x, y);
        let (k2x, k2y) = rhs(x + k1x * (h / 2.0), y + k1y * (h / 2.0));
        let (k3x, k3y) = rhs(x + k2x * (h / 2.0), y + k2y * (h / 2.0));
        let (k4x, k4y) = rhs(x + k3x * h, y + k3y * h);
        [
            x + (k1x + k2x * 2.0 + k3x * 2.0 + k4x) * (h / 6.0),
            y + (k1y + k2y * 2.0 + k3y * 2.0 + k4y) * (h / 6.0),
        ]
    })
}

/// The loss on the array trace: the parameters are the elements of `p`.
pub fn loss_array(p: &TArray, steps: usize) -> Result<TScalar> {
    loss_array_with(p, steps, Checkpoints::Auto)
}

/// [`loss_array`] with the gradient's residual chosen by `c`.
pub fn loss_array_with(p: &TArray, steps: usize, c: Checkpoints) -> Result<TScalar> {
    let q: Vec<TScalar> = (0..p.len()).map(|i| p.get(i)).collect::<Result<_>>()?;
    loss_with(&q, steps, c)
}

/// The same integration as a [`while_loop`](optic_ad::while_loop) on a
/// clock: RK4 steps of `h = 10/steps` while `t < 10 − h/2`, the same
/// `steps` steps as [`loss`] (the clock adds one carried value and the
/// loop keeps one comparison per step).
pub fn loss_while<T: Real>(p: &[T], steps: usize) -> Result<T> {
    let h = 10.0 / steps as f64;
    let end = 10.0 - h / 2.0;
    let rhs = |x: T, y: T| (p[0] * x - p[1] * x * y, p[3] * x * y - p[2] * y);
    let (x, y, _) = optic_ad::while_loop(
        2 * steps,
        (p[4], p[5], T::cst(0.0)),
        |(_, _, t)| *t < end,
        |(x, y, t): (T, T, T)| {
            let (k1x, k1y) = rhs(x, y);
            let (k2x, k2y) = rhs(x + k1x * (h / 2.0), y + k1y * (h / 2.0));
            let (k3x, k3y) = rhs(x + k2x * (h / 2.0), y + k2y * (h / 2.0));
            let (k4x, k4y) = rhs(x + k3x * h, y + k3y * h);
            (
                x + (k1x + k2x * 2.0 + k3x * 2.0 + k4x) * (h / 6.0),
                y + (k1y + k2y * 2.0 + k3y * 2.0 + k4y) * (h / 6.0),
                t + h,
            )
        },
    )?;
    Ok((x - 1.0) * (x - 1.0) + (y - 1.0) * (y - 1.0))
}

/// [`loss_while`] on the array trace.
pub fn loss_while_array(p: &TArray, steps: usize) -> Result<TScalar> {
    let q: Vec<TScalar> = (0..p.len()).map(|i| p.get(i)).collect::<Result<_>>()?;
    loss_while(&q, steps)
}
