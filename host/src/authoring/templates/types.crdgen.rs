//! Prints the {{kind}} CRD as YAML:
//! `cargo run -q -p {{types_crate}} --bin {{crdgen}} > crds/{{crd_file}}`.

fn main() {
    match {{types_ident}}::crd_yaml() {
        Ok(yaml) => print!("{yaml}"),
        Err(err) => {
            eprintln!("{{crdgen}}: {err}");
            std::process::exit(1);
        }
    }
}
