//! The functor-law checkers on hostile arguments (issue 6, defect 6).

use optic_ad::functor::laws::{forward_preserves_identity, preserves_identity};
use optic_ad::Error;

/// `preserves_identity(1 << 40, …)` tried to build a 2⁴⁰-input program (4 TB)
/// before looking at the point. Lengths are checked first.
#[test]
fn issue_6_preserves_identity_checks_lengths_before_building() {
    let r = preserves_identity(1 << 40, &[1.0], &[1.0]);
    assert!(matches!(r, Err(Error::LengthMismatch { .. })), "{r:?}");
    let r = preserves_identity(2, &[1.0, 2.0], &[1.0]);
    assert!(matches!(r, Err(Error::LengthMismatch { .. })), "{r:?}");
    let r = forward_preserves_identity(1 << 40, &[1.0], &[1.0]);
    assert!(matches!(r, Err(Error::LengthMismatch { .. })), "{r:?}");
    assert!(preserves_identity(2, &[1.0, 2.0], &[3.0, 4.0]).unwrap());
}
