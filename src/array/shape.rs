//! The shape of an array value (rank 0, 1 or 2).

use std::fmt;

/// The shape of an array value: a scalar (rank 0), a vector of `n`
/// elements (rank 1) or a `rows × cols` matrix (rank 2), stored row-major.
/// Constant matrices also enter programs as data ([`Matrix`](super::Matrix)) through
/// [`MatVec`](super::prims::MatVec) and
/// [`VecMat`](super::prims::VecMat).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Shape {
    /// One value (rank 0).
    Scalar,
    /// `n` values (rank 1).
    Vector(usize),
    /// `rows × cols` values (rank 2), row-major.
    Matrix(usize, usize),
}

impl Shape {
    /// Number of elements: 1 for a scalar.
    pub fn len(self) -> usize {
        match self {
            Shape::Scalar => 1,
            Shape::Vector(n) => n,
            Shape::Matrix(r, c) => r.saturating_mul(c),
        }
    }

    /// Whether the shape holds no elements (a vector of length 0).
    pub fn is_empty(self) -> bool {
        self.len() == 0
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shape::Scalar => write!(f, "scalar"),
            Shape::Vector(n) => write!(f, "vector[{n}]"),
            Shape::Matrix(r, c) => write!(f, "matrix[{r}×{c}]"),
        }
    }
}
