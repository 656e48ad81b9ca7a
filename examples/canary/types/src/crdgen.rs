//! Prints the CanaryDeployment CRD as YAML: `cargo run -p canary-types --bin canary-crdgen > examples/canary/crds/canarydeployment.yaml`.

fn main() {
    match canary_types::crd_yaml() {
        Ok(yaml) => print!("{yaml}"),
        Err(err) => {
            eprintln!("crdgen: {err}");
            std::process::exit(1);
        }
    }
}
