use optic_ad::*;
use typenum::U3;
fn h<T: Real>(t: T) -> T {
    t.sin().exp() * (t * t + 1.0).ln() + t.tanh() / (t * t + 1.0)
}
fn main() {
    let d = Derivatives::<U3, _>::new(h, 0.7).unwrap();
    let p = d.program();
    let negs = p.ops().iter().filter(|o| matches!(o, Op::Neg(_))).count();
    println!("len {} negs {}", p.len(), negs);
}
