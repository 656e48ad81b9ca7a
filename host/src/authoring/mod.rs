//! The authoring experience, Autopilot's `ap init/build/deploy` loop for wasmpilot:
//! `init` scaffolds an operator project, `generate` writes its typed phase API, `build` compiles its components, `simulate` runs them
//! offline step by step, `graph` draws the phase graph, `plan` shows what the operator would
//! do to a live resource (server-side dry run), `import metacontroller` turns a Metacontroller
//! controller and its hook into an operator directory. See docs/tutorial.md.

pub mod build;
pub mod generate;
pub mod graph;
pub mod import_metacontroller;
pub mod init;
pub mod plan;
pub mod scaffold;
pub mod simulate;
pub mod workspace;
