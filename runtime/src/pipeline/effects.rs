//! What one phase step reads and writes, as an interface ([`Effects`]) so the step is written
//! once: the controller implements it on the cluster, `plan` as a server-side dry run and
//! `simulate` on an in-memory world.

use crate::crd::KindRef;
use crate::definition::PhaseDefinition;
use crate::pipeline::decision::Decision;
use crate::pipeline::error::ReconcileError;
use crate::pipeline::inputs::ObjectSource;
use crate::pipeline::outputs::{ApplyReport, CheckedOutput, ExistingObjects, OutputError};
use crate::pipeline::request::Samples;
use crate::pipeline::status::StatusUpdate;
use crate::sandbox::{PhaseModule, SyncRequest, WorkerSlot};
use kube::api::{DynamicObject, ObjectMeta};
use std::time::Duration;

/// The phase's component and where its worker's request is read from.
pub struct PhaseReads<'a, S> {
    pub module: PhaseModule,
    /// The objects the phase's inputs are selected from.
    pub source: &'a S,
    /// Where the phase's metric samples come from.
    pub samples: Samples<'a>,
    /// A worker slot taken before the request is built, so calls waiting for one hold no
    /// request (`None`: taken when the worker runs).
    pub slot: Option<WorkerSlot>,
}

/// A worker call as it happened, for metrics and evidence.
pub struct WorkerCall<'a> {
    pub phase: &'a str,
    /// The deciding component's digest.
    pub module: &'a str,
    /// Exactly what the worker was handed, when [`Effects::keeps_request`] asked for it.
    pub request: Option<SyncRequest>,
    /// From the worker's start to its checked decision.
    pub duration: Duration,
    pub decided: &'a Result<Decision, ReconcileError>,
}

/// What a phase's worker is handed, and who hears of its call: enough to decide
/// ([`crate::pipeline::step::decide`]; `run-phase` and `capture` stop there).
#[allow(async_fn_in_trait)]
pub trait WorkerReads {
    type Source: ObjectSource;

    /// The phase's component and what its request is read from, once the resource is found
    /// running `phase` (the controller waits here for the caches the phase reads and takes a
    /// worker slot; `plan` lists the cluster).
    async fn reads(
        &mut self,
        phase: &PhaseDefinition,
    ) -> Result<PhaseReads<'_, Self::Source>, ReconcileError>;

    /// Whether the worker's request is kept for [`Effects::called`] (a copy of every input).
    fn keeps_request(&self, _phase: &str) -> bool {
        false
    }

    /// The worker was called (the controller records metrics and evidence).
    fn called(&mut self, _call: WorkerCall<'_>) {}
}

/// What a phase step reads besides its worker's request (the objects that exist) and writes
/// (outputs applied, objects pruned, the status). Each write method is called at most once per
/// step, in this order: apply, prune, status.
#[allow(async_fn_in_trait)]
pub trait Effects: WorkerReads {
    type Existing: ExistingObjects;

    /// The objects of the output kinds that exist: what takeovers and pruning are checked
    /// against.
    fn existing(&self) -> &Self::Existing;

    /// Before the first write of a decision that writes outputs or prunes (the controller checks
    /// that the resource it decided from is still the API server's).
    async fn before_writes(&mut self, _resource: &DynamicObject) -> Result<(), ReconcileError> {
        Ok(())
    }

    /// Applies checked outputs of `phase` for the resource `owner_uid` (labelled with operator
    /// and phase); one that fails does not stop the others.
    async fn apply(
        &mut self,
        phase: &str,
        owner_uid: &str,
        outputs: Vec<CheckedOutput>,
    ) -> ApplyReport;

    /// Deletes objects the phase applied before and no longer returns; how many went, or how
    /// many went before one failed.
    async fn prune(
        &mut self,
        objects: Vec<(KindRef, ObjectMeta)>,
    ) -> Result<usize, (usize, OutputError)>;

    /// Writes the status update unless it changes nothing (Conditions changing now stamped
    /// `now`), conditional on the resource's resourceVersion when `how.conditional`; the
    /// resource as written, if it wrote. A `how.holdable` update may instead be kept in memory
    /// and written with the next phase's (the resource returned then carries it unwritten).
    async fn write_status(
        &mut self,
        resource: &DynamicObject,
        update: &StatusUpdate,
        now: &str,
        how: StatusWrite,
    ) -> Result<Option<DynamicObject>, ReconcileError>;
}

/// How a step's status update may be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusWrite {
    /// Only onto the resourceVersion the decision was made from (a 409 otherwise).
    pub conditional: bool,
    /// The update moves the resource to a phase whose worker runs next and wrote nothing else
    /// (no output applied or pruned): the controller may hold it and write it together with the
    /// next phase's update, one status write for both.
    pub holdable: bool,
}
