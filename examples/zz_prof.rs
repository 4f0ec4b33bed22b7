#[path = "newton_cg/model.rs"]
#[allow(dead_code)]
mod model;
fn main() {
    let data = model::load_wdbc(std::path::Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/data/wdbc.csv"
    )))
    .unwrap();
    let x0 = vec![0.0; 31];
    for _ in 0..5 {
        let t = std::time::Instant::now();
        let p = optic_ad::trace(|t| vec![model::objective(t, &data)], &x0).unwrap();
        let t1 = t.elapsed();
        let h =
            optic_ad::Hvp::new(|t: &[optic_ad::Tracer]| model::objective(t, &data), &x0).unwrap();
        println!(
            "trace {:?} (len {}), Hvp::new {:?} total; {:?}",
            t1,
            p.len(),
            t.elapsed() - t1,
            h
        );
    }
}
