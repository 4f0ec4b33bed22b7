//! K. Fischer, "∂P.jl terminology and notation guide", §I.A, Snippets 2–4, in
//! Rust: two representatives of one optic (`Index`, Fischer's `SetIndex`, and
//! `Path`, his `FastSetIndex`) with the same action and different residuals,
//! and the block-style and continuation-style interfaces.
//!
//! Fischer's tuple `(1, (2, 3))` is the nested vector `[[1], [2, 3]]`, and
//! its 1-based `SetIndex(2) § SetIndex(1)` is `Index::new(1).then(Index::new(0))`.
//!
//! Run with `cargo run --example lens`.

use optic_ad::optic::{Index, LensError, Optic, Path};

fn held(v: &[Vec<i32>]) -> usize {
    v.iter().map(Vec::len).sum()
}

/// A short type name: `Vec<Vec<i32>>` rather than `alloc::vec::Vec<…>`.
fn type_name<T>(_: &T) -> String {
    std::any::type_name::<T>().replace("alloc::vec::", "")
}

fn main() -> Result<(), LensError> {
    let tup = vec![vec![1], vec![2, 3]];
    println!("tup = {tup:?}   (Fischer's (1, (2, 3)))");
    println!();

    // Snippet 2: SetIndex(2) § SetIndex(1).
    let o = Index::new(1).then(Index::new(0));
    println!("o  = {o:?}   (SetIndex(2) § SetIndex(1))");
    let (m, c) = o.left(tup.clone())?;
    println!("  m, c = left(o, tup)");
    println!("  m = {m:?}");
    println!("  c = {c}");
    println!(
        "  residual type {}: {} values, {} bytes on the stack",
        type_name(&m),
        held(&m.0) + m.1.len(),
        std::mem::size_of_val(&m),
    );
    println!("  right(o, m, c + 100) = {:?}", o.right(m, c + 100)?);
    println!();

    // Snippet 3: FastSetIndex(2) § FastSetIndex(1) concatenates the paths.
    let of = Path::new(1).then_path(Path::new(0));
    println!("of = {of:?}   (FastSetIndex(2) § FastSetIndex(1))");
    let (m, c) = of.left(tup.clone())?;
    println!("  m, c = left(of, tup)");
    println!("  m = {m:?}");
    println!("  c = {c}");
    println!(
        "  residual type {}: {} values, {} bytes on the stack",
        type_name(&m),
        held(&m),
        std::mem::size_of_val(&m),
    );
    println!("  right(of, m, c + 100) = {:?}", of.right(m, c + 100)?);
    println!();
    println!("Same optic, smaller residual. Handing o's residual to of.right is a");
    println!("type error here (Fischer's Julia gets a MethodError at run time).");
    println!();

    // Snippet 4: interfaces that never expose the residual.
    println!(
        "block style:        of.modify(tup, |c| c + 100) = {:?}",
        of.modify(tup.clone(), |c| c + 100)?
    );
    let (c, back) = of.view(tup.clone())?;
    println!(
        "continuation style: let (c, back) = of.view(tup); c = {c}; back(c + 100) = {:?}",
        back(c + 100)?
    );
    println!(
        "block style on o:   o.modify(tup, |c| c + 100)  = {:?}",
        o.modify(tup.clone(), |c| c + 100)?
    );
    println!();

    // Bad input is an error value, not a panic.
    let err = Index::new(5)
        .then(Index::new(0))
        .modify(tup, |c: i32| c + 100);
    println!("Index::new(5).then(Index::new(0)).modify(tup, ..) = {err:?}");
    if let Err(e) = err {
        println!("  error message: {e}");
    }
    Ok(())
}
