//! `agentloop-verify [--quick | --deep]`: checks every model and prints, per model, the
//! properties checked, the states explored, the depth and the time; exits 1 if a property
//! is violated (or a `sometimes` example is not reached), 2 on a bad argument.

use agentloop_verify::check::{check_all, Bound};

fn main() {
    let mut bound = Bound::Ci;
    for arg in std::env::args().skip(1) {
        bound = match arg.as_str() {
            "--quick" => Bound::Quick,
            "--deep" => Bound::Deep,
            "--ci" => Bound::Ci,
            "-h" | "--help" => {
                println!("usage: agentloop-verify [--quick | --ci | --deep]");
                return;
            }
            other => {
                eprintln!("agentloop-verify: unknown argument {other:?} (try --help)");
                std::process::exit(2);
            }
        };
    }
    println!("checking at bound {bound:?}");
    let reports = check_all(bound, |r| print!("{}", r.render()));
    let failed = reports.iter().filter(|r| !r.ok()).count();
    let states: usize = reports.iter().map(|r| r.unique_states).sum();
    println!(
        "{} models, {} states in all: {}",
        reports.len(),
        states,
        if failed == 0 {
            "every property holds".to_string()
        } else {
            format!("{failed} with violations")
        }
    );
    if failed > 0 {
        std::process::exit(1);
    }
}
