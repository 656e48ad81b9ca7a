//! Prints the MyOwnShell CRD as YAML: `cargo run -p myownshell-types --bin myownshell-crdgen > examples/myownshell/crds/myownshell.yaml`.

fn main() {
    match myownshell_types::crd_yaml() {
        Ok(yaml) => print!("{yaml}"),
        Err(err) => {
            eprintln!("crdgen: {err}");
            std::process::exit(1);
        }
    }
}
