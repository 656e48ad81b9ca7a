//! Prints the AutoRoute CRD as YAML: `cargo run -p autoroute-types --bin crdgen > examples/autoroute/crds/autoroute.yaml`.

fn main() {
    match autoroute_types::crd_yaml() {
        Ok(yaml) => print!("{yaml}"),
        Err(err) => {
            eprintln!("crdgen: {err}");
            std::process::exit(1);
        }
    }
}
