//! What every generated typed API shares, so `wasmpilot generate` writes only what an operator
//! declares: [`phases!`](crate::phases) makes the `Phase` enum, [`phase_api!`](crate::phase_api)
//! a phase's `Next`, `Inputs`, `Outcome`, `Worker` and `Export`, and
//! [`inputs_view!`](crate::inputs_view) a bare inputs view (the finalizer's).

/// The `Phase` enum of an operator: its phases in declaration order with the names of
/// `.status.phase`, `ALL`, `INITIAL`, `name`, `from_name`, `Display` and `Into<String>`.
///
/// ```
/// wasmpilot_guest::phases! {
///     /// The phases of AutoRoute.
///     pub enum Phase {
///         /// New: moves on to Syncing.
///         Initializing = "Initializing",
///         Syncing = "Syncing",
///     }
///     initial = Initializing
/// }
/// assert_eq!(Phase::from_name("Syncing"), Some(Phase::Syncing));
/// assert_eq!(Phase::INITIAL.to_string(), "Initializing");
/// assert_eq!(Phase::ALL.len(), 2);
/// ```
#[macro_export]
macro_rules! phases {
    (
        $(#[$meta:meta])*
        $vis:vis enum $phase:ident {
            $( $(#[$variant_meta:meta])* $variant:ident = $name:literal ),+ $(,)?
        }
        initial = $initial:ident
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $phase {
            $( $(#[$variant_meta])* $variant ),+
        }

        impl $phase {
            /// Every phase, in declaration order.
            pub const ALL: [$phase; [$($name),+].len()] = [$($phase::$variant),+];
            /// The phase a new resource starts in.
            pub const INITIAL: $phase = $phase::$initial;

            /// The phase's name, as in `.status.phase`.
            pub const fn name(self) -> &'static str {
                match self {
                    $( $phase::$variant => $name ),+
                }
            }

            /// The phase called `name`, if operator.yaml declares it.
            pub fn from_name(name: &str) -> Option<$phase> {
                $phase::ALL.into_iter().find(|phase| phase.name() == name)
            }
        }

        impl core::fmt::Display for $phase {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str(self.name())
            }
        }

        impl From<$phase> for String {
            fn from(phase: $phase) -> String {
                phase.name().to_owned()
            }
        }
    };
}

/// A typed view of the inputs a worker declares: `Inputs<'a>` with `new` and `untyped`; the
/// generated code adds one accessor per declared input (in an `impl<'a> Inputs<'a>` block).
#[macro_export]
macro_rules! inputs_view {
    ($(#[$meta:meta])*) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug)]
        pub struct Inputs<'a>(&'a $crate::Inputs);

        impl<'a> Inputs<'a> {
            /// The typed view of what the host handed over.
            pub fn new(inputs: &'a $crate::Inputs) -> Self {
                Self(inputs)
            }

            /// The untyped inputs, for what the accessors do not cover.
            pub fn untyped(&self) -> &'a $crate::Inputs {
                self.0
            }
        }
    };
}

/// One phase's typed API, in the phase's module (where `$phase`, the operator's `Phase` enum,
/// is in scope): `Next` (the phases it may move to), `Inputs` (see [`inputs_view!`](crate::inputs_view)),
/// `Outcome` (`next`, `stay`, `status`, `requeue_after`; the generated code adds one method per
/// declared output kind), the `Worker` trait it is written against, and `Export`, which runs a
/// `Worker` as a [`PhaseWorker`](crate::PhaseWorker) for `export!` and the tests.
///
/// ```
/// wasmpilot_guest::phases! {
///     pub enum Phase { Syncing = "Syncing", Ready = "Ready" }
///     initial = Syncing
/// }
/// mod syncing {
///     use super::Phase;
///     wasmpilot_guest::phase_api! {
///         /// Where `Syncing` may go.
///         phase = Phase, name = "Syncing", next = [Syncing, Ready]
///     }
/// }
/// fn main() {
///     assert_eq!(syncing::Outcome::next(syncing::Next::Ready).next_phase(), "Ready");
///     assert_eq!(syncing::Outcome::stay().next_phase(), "Syncing");
/// }
/// ```
#[macro_export]
macro_rules! phase_api {
    (
        $(#[$next_meta:meta])*
        phase = $phase:ident, name = $name:literal, next = [ $($next:ident),+ $(,)? ]
    ) => {
        $(#[$next_meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum Next {
            $( $next ),+
        }

        impl From<Next> for $phase {
            fn from(next: Next) -> $phase {
                match next {
                    $( Next::$next => $phase::$next ),+
                }
            }
        }

        impl core::fmt::Display for Next {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str($phase::from(*self).name())
            }
        }

        $crate::inputs_view! {
            #[doc = concat!("The inputs `", $name, "` declares, one accessor each.")]
        }

        #[doc = concat!("What `", $name, "` decided: a phase from [`Next`], a status patch, outputs of the declared kinds.")]
        #[must_use]
        #[derive(Clone, Debug, PartialEq)]
        pub struct Outcome($crate::Outcome);

        impl Outcome {
            /// Move to `next` with no status change and no outputs.
            pub fn next(next: Next) -> Self {
                Self($crate::Outcome::next($phase::from(next).name()))
            }

            #[doc = concat!("Stay in `", $name, "`.")]
            pub fn stay() -> Self {
                Self($crate::Outcome::next($name))
            }

            /// Merge `status` into the resource's `.status` (see `wasmpilot_guest::Outcome::status`).
            pub fn status(self, status: impl $crate::serde::Serialize) -> Self {
                Self(self.0.status(status))
            }

            /// Run this resource again after `delay`.
            pub fn requeue_after(self, delay: core::time::Duration) -> Self {
                Self(self.0.requeue_after(delay))
            }

            /// The phase this outcome moves to.
            pub fn next_phase(&self) -> &str {
                self.0.next_phase()
            }
        }

        impl From<Outcome> for $crate::Outcome {
            fn from(outcome: Outcome) -> Self {
                outcome.0
            }
        }

        #[doc = concat!("Decides `", $name, "` against this module's typed inputs and outcome. Export it with")]
        /// `wasmpilot_guest::export!(phase = <module>::Export<MyWorker>);` and test it with
        /// `SyncTest::run(&<module>::Export(MyWorker))`.
        pub trait Worker {
            /// The custom resource type (or `serde_json::Value`).
            type Resource: $crate::serde::de::DeserializeOwned;

            /// Decides the phase.
            ///
            /// # Errors
            /// `WorkerError::retryable` to be retried with backoff, `WorkerError::fatal` to stop
            /// until the resource or an input changes.
            fn sync(
                &self,
                ctx: &$crate::Context,
                resource: Self::Resource,
                inputs: Inputs<'_>,
            ) -> Result<Outcome, $crate::WorkerError>;
        }

        /// Runs a [`Worker`] as the SDK's `PhaseWorker`.
        #[derive(Clone, Copy, Debug, Default)]
        pub struct Export<W>(pub W);

        impl<W: Worker> $crate::PhaseWorker for Export<W> {
            type Resource = W::Resource;

            fn sync(
                &self,
                ctx: &$crate::Context,
                resource: W::Resource,
                inputs: &$crate::Inputs,
            ) -> Result<$crate::Outcome, $crate::WorkerError> {
                self.0
                    .sync(ctx, resource, Inputs(inputs))
                    .map($crate::Outcome::from)
            }
        }
    };
}
