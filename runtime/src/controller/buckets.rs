//! Active-active replicas: each operator's resources fall into buckets by namespace, each bucket a
//! `coordination.k8s.io` Lease; a replica reconciles only in the buckets it holds, balanced by weight.
//!
//! Every replica renews a member Lease and, each tick, computes the same assignment from the
//! Leases it lists ([`assign`]: current holders keep their buckets up to a fair share of the
//! weight, the rest go to their home member by rendezvous hashing — the same for every operator,
//! so a replica's caches need only its buckets' namespaces), acquires what it is assigned and is free,
//! and releases what it holds but is no longer assigned — after closing the bucket to new
//! reconciles and waiting for the ones in flight. Writes are conditional on the Lease's
//! resourceVersion, so two replicas never both acquire one bucket. Rounds come every renewal,
//! or sooner: when resources arriving would move a bucket (a burst is shared while it is worked
//! through) and while a bucket assigned here is still being handed over.

use crate::controller::leader::LeaseTiming;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{DynamicObject, ListParams, ObjectMeta, PostParams};
use kube::runtime::reflector::Store;
use kube::{Api, Client, ResourceExt};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Label on every Lease of this scheme: `bucket` or `member`.
pub const LEASE_ROLE_LABEL: &str = "wasmpilot.io/lease";
/// Label on a bucket Lease: its bucket number.
pub const BUCKET_LABEL: &str = "wasmpilot.io/bucket";
/// Label on a member Lease: the number of buckets per operator that replica uses (replicas
/// using different numbers would split resources differently; they refuse to acquire).
pub const BUCKETS_LABEL: &str = "wasmpilot.io/buckets";
/// Annotation on a bucket Lease: the resources in the bucket when its holder last renewed.
pub const WEIGHT_ANNOTATION: &str = "wasmpilot.io/resources";
/// Annotation on a bucket Lease: the operator's full name (its label may be cut).
pub const OPERATOR_ANNOTATION: &str = "wasmpilot.io/operator";
/// Annotation on a member Lease: the operators this replica runs with their resources listed
/// (comma-separated); only those count it as a member (one whose load failed there does not).
pub const SERVES_ANNOTATION: &str = "wasmpilot.io/serves";
/// Annotation on a member Lease: the operators this replica has loaded and is listing the
/// resources of, each with when it began (`name@unix-seconds`, comma-separated). For one
/// Lease duration from then the others count it as a member of those operators (they leave
/// its share to it rather than take every bucket while it lists); past that, not until it
/// serves them.
pub const LOADING_ANNOTATION: &str = "wasmpilot.io/loading";

/// The bucket of a resource: the 64-bit FNV-1a hash of its namespace (so a resource, its
/// inputs and its outputs stay together; of its name when cluster-scoped) modulo `buckets`.
/// The low bits, not ranges of the hash: FNV-1a's high bits barely change between names that
/// differ only at the end (`team-1`, `team-2`), so ranges would pile such namespaces into a
/// few buckets (see the test). The same on every replica, version and platform.
pub fn bucket_of(namespace: Option<&str>, name: &str, buckets: u32) -> u32 {
    (fnv1a64(namespace.unwrap_or(name)) % u64::from(buckets.max(1))) as u32
}

/// The 64-bit FNV-1a hash (Go's `hash/fnv` New64a; the hash KEP-5866's `shardRange` takes).
pub fn fnv1a64(key: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The namespaces a sharded replica's watch caches keep: those in a bucket it holds for some
/// operator (cluster-scoped objects always). The Lease follower sets it; informers follow it,
/// relisting when it grows and dropping what it no longer covers when it shrinks.
pub struct CacheScope {
    buckets: u32,
    kept: tokio::sync::watch::Sender<Arc<BTreeSet<u32>>>,
}

impl CacheScope {
    /// A scope keeping no namespace yet (until a bucket is held).
    pub fn new(buckets: u32) -> Self {
        CacheScope {
            buckets: buckets.max(1),
            kept: tokio::sync::watch::Sender::new(Arc::default()),
        }
    }

    /// The buckets kept now.
    pub fn current(&self) -> Arc<BTreeSet<u32>> {
        self.kept.borrow().clone()
    }

    /// The buckets kept now, and each change from here on.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<Arc<BTreeSet<u32>>> {
        self.kept.subscribe()
    }

    /// Whether a cache keeping `kept` holds the objects of `namespace` (`None` or empty:
    /// cluster-scoped, always kept).
    pub fn covers(&self, kept: &BTreeSet<u32>, namespace: Option<&str>) -> bool {
        match namespace {
            None | Some("") => true,
            Some(ns) => kept.contains(&bucket_of(Some(ns), "", self.buckets)),
        }
    }

    fn set(&self, kept: BTreeSet<u32>) {
        self.kept.send_if_modified(|current| {
            if **current == kept {
                return false;
            }
            *current = Arc::new(kept);
            true
        });
    }
}

/// A short stable digest of a name, for Lease names and label values that must stay short.
fn digest8(text: &str) -> String {
    use sha2::Digest;
    hex::encode(&sha2::Sha256::digest(text.as_bytes())[..4])
}

/// `text` as a DNS label part: lowercase alphanumerics and `-`, at most `max` bytes, plus a
/// digest when anything was changed or cut, so distinct inputs stay distinct.
fn dns_part(text: &str, max: usize) -> String {
    let clean: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let clean = clean.trim_matches('-').to_string();
    if clean == text && clean.len() <= max && !clean.is_empty() {
        clean
    } else {
        let keep: String = clean.chars().take(max.saturating_sub(9)).collect();
        format!("{}-{}", keep.trim_end_matches('-'), digest8(text))
            .trim_start_matches('-')
            .to_string()
    }
}

/// The Lease of bucket `bucket` of `operator`.
pub fn bucket_lease_name(operator: &str, bucket: u32) -> String {
    format!("wasmpilot-{}-b{bucket}", dns_part(operator, 40))
}

/// The member Lease of replica `identity`.
pub fn member_lease_name(identity: &str) -> String {
    format!("wasmpilot-member-{}", dns_part(identity, 60))
}

/// The field manager of a replica's member Lease writes: no operator's (`wasmpilot-<name>`, and
/// a name never holds a colon).
const MEMBER_MANAGER: &str = "wasmpilot:replica";

/// Whether `lease`, labelled as a member Lease, is a replica's own: named after its holder, its
/// holder not set by an operator's apply (an output the host applied for an operator carries
/// that operator's field manager, `wasmpilot-<name>`). Another is ignored: a forged member
/// would have buckets assigned to a replica that never takes them.
fn is_replicas_own(lease: &Lease) -> bool {
    let Some(holder) = lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
    else {
        return false;
    };
    if lease.metadata.name.as_deref() != Some(member_lease_name(holder).as_str()) {
        return false;
    }
    let holder_set_by_operator = lease.metadata.managed_fields.iter().flatten().any(|m| {
        m.manager
            .as_deref()
            .is_some_and(|manager| manager.starts_with("wasmpilot-"))
            && m.fields_v1
                .as_ref()
                .is_some_and(|f| f.0.pointer("/f:spec/f:holderIdentity").is_some())
    });
    !holder_set_by_operator
}

/// A label value naming `operator` (cut with a digest beyond 63 bytes).
fn operator_label_value(operator: &str) -> String {
    if operator.len() <= 63 {
        operator.to_string()
    } else {
        dns_part(operator, 63)
    }
}

/// One bucket as every replica sees it in the Lease listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BucketView {
    pub bucket: u32,
    /// Resources in it, as its last holder wrote.
    pub weight: u64,
    /// Its holder, if the Lease is unexpired and held by a live member.
    pub holder: Option<String>,
}

/// A bucket's home among `members`: the member that ranks it highest by rendezvous hashing
/// (FNV-1a of `member/bucket`). The same for every operator, so a replica tends to hold the same
/// buckets — the same namespaces — of every operator, and its caches keep only those; a member
/// joining or leaving moves only the buckets whose home it is or was.
pub fn home_of<'a>(members: &[&'a String], bucket: u32) -> Option<&'a String> {
    ranked(members, bucket).into_iter().next()
}

/// MurmurHash3's 64-bit finalizer: every input bit reaches every output bit. FNV-1a alone
/// ranks names that differ only at the end (`host-a/3`, `host-b/3`) by barely different high
/// bits, which would make one member every bucket's home.
fn mix64(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

/// `members` in the order bucket `bucket` prefers them (its home first).
fn ranked<'a>(members: &[&'a String], bucket: u32) -> Vec<&'a String> {
    let mut ranked = members.to_vec();
    ranked.sort_by_key(|m| {
        (
            std::cmp::Reverse(mix64(fnv1a64(&format!("{m}/{bucket}")))),
            m.as_str(),
        )
    });
    ranked
}

/// Which member each bucket goes to (index = position in `buckets`). Deterministic for the same
/// input, so every replica computes the same: each member's fair share is the total weight
/// (each bucket counting one more than its resources) over the members; current holders keep
/// their buckets — those whose home they are first, then the heaviest — while they stay
/// within 115 % of the share; every other bucket, heaviest first, goes to its home
/// ([`home_of`]) while that stays within the share, else to the least loaded member (ties:
/// first by name); then a member left under 85 % of the share takes buckets from the most
/// loaded one.
pub fn assign(members: &[String], buckets: &[BucketView]) -> Vec<String> {
    if members.is_empty() {
        return Vec::new();
    }
    let mut members: Vec<&String> = members.iter().collect();
    members.sort();
    members.dedup();
    let weight = |b: &BucketView| b.weight.saturating_add(1);
    let total: u64 = buckets.iter().map(weight).sum();
    let share = total as f64 / members.len() as f64;
    let cap = share * 1.15;
    let mut order: Vec<usize> = (0..buckets.len()).collect();
    order.sort_by(|&a, &b| {
        weight(&buckets[b])
            .cmp(&weight(&buckets[a]))
            .then(buckets[a].bucket.cmp(&buckets[b].bucket))
    });
    let homes: Vec<Option<&String>> = buckets
        .iter()
        .map(|b| home_of(&members, b.bucket))
        .collect();
    let at_home = |i: usize| {
        buckets[i]
            .holder
            .as_ref()
            .is_some_and(|h| Some(h) == homes[i])
    };
    let mut keeping = order.clone();
    keeping.sort_by_key(|&i| !at_home(i));
    let mut load: BTreeMap<&String, u64> = members.iter().map(|m| (*m, 0)).collect();
    let mut to: Vec<Option<&String>> = vec![None; buckets.len()];
    for &i in &keeping {
        let Some(holder) = buckets[i].holder.as_ref() else {
            continue;
        };
        if let Some(l) = load.get_mut(holder) {
            if (*l + weight(&buckets[i])) as f64 <= cap {
                *l += weight(&buckets[i]);
                to[i] = Some(holder);
            }
        }
    }
    // Free buckets by number, not weight: which ones overflow their home must not depend on
    // one operator's weights.
    let mut placing: Vec<usize> = (0..buckets.len()).collect();
    placing.sort_by_key(|&i| buckets[i].bucket);
    for &i in &placing {
        if to[i].is_some() {
            continue;
        }
        // The most preferred member with room: the same choice for every operator whose
        // weights are alike, so overflow from a home also lands on the same member.
        let w = weight(&buckets[i]);
        if let Some(m) = ranked(&members, buckets[i].bucket)
            .into_iter()
            .find(|m| (load[*m] + w) as f64 <= share)
        {
            if let Some(l) = load.get_mut(m) {
                *l += w;
            }
            to[i] = Some(m);
            continue;
        }
        let least = members
            .iter()
            .min_by_key(|m| (load[*m], **m))
            .copied()
            .unwrap_or(members[0]);
        if let Some(l) = load.get_mut(least) {
            *l += weight(&buckets[i]);
        }
        to[i] = Some(least);
    }
    lift_the_underloaded(&members, buckets, &mut to, &mut load, share);
    to.into_iter()
        .map(|m| m.cloned().unwrap_or_default())
        .collect()
}

/// Holders keeping up to 115 % can leave a member at 70 % of the share (two at 115 %, one
/// with the rest): while a member is under 85 %, it takes from the most loaded member the
/// heaviest bucket that narrows the gap between them and keeps it within 115 % (where holders
/// keep theirs, so the result is stable).
/// Deterministic: members by name, buckets by weight then number.
fn lift_the_underloaded<'a>(
    members: &[&'a String],
    buckets: &[BucketView],
    to: &mut [Option<&'a String>],
    load: &mut BTreeMap<&'a String, u64>,
    share: f64,
) {
    let weight = |i: usize| buckets[i].weight.saturating_add(1);
    for _ in 0..buckets.len() {
        let Some(low) = members
            .iter()
            .copied()
            .filter(|m| (load[*m] as f64) < share * 0.85)
            .min_by_key(|m| (load[*m], *m))
        else {
            return;
        };
        let Some(high) = members
            .iter()
            .copied()
            .max_by_key(|m| (load[*m], std::cmp::Reverse(*m)))
        else {
            return;
        };
        let gap = load[high].saturating_sub(load[low]);
        let Some(i) = (0..buckets.len())
            .filter(|&i| to[i] == Some(high))
            // Moving w narrows the gap only if w < gap.
            .filter(|&i| weight(i) < gap && (load[low] + weight(i)) as f64 <= share * 1.15)
            .max_by_key(|&i| (weight(i), std::cmp::Reverse(buckets[i].bucket)))
        else {
            return;
        };
        let w = weight(i);
        if let Some(l) = load.get_mut(high) {
            *l -= w;
        }
        if let Some(l) = load.get_mut(low) {
            *l += w;
        }
        to[i] = Some(low);
    }
}

/// The operators a member Lease's annotations say its replica serves: those it lists the
/// resources of, and those it began listing less than `grace` ago (it is joining: its share is
/// left to it). `None` for a Lease without them (an older replica's: every operator).
fn served_by(
    annotations: &BTreeMap<String, String>,
    now: jiff::Timestamp,
    grace: Duration,
) -> Option<BTreeSet<String>> {
    let serves = annotations.get(SERVES_ANNOTATION)?;
    let mut served: BTreeSet<String> = serves
        .split(',')
        .filter(|o| !o.is_empty())
        .map(str::to_string)
        .collect();
    let grace = i64::try_from(grace.as_secs()).unwrap_or(i64::MAX);
    let loading = annotations.get(LOADING_ANNOTATION).map(String::as_str);
    for entry in loading.unwrap_or_default().split(',') {
        let Some((operator, since)) = entry.rsplit_once('@') else {
            continue;
        };
        let Ok(since) = since.parse::<i64>() else {
            continue;
        };
        // (A clock far ahead of ours counts as expired too.)
        let age = now.as_second().saturating_sub(since);
        if !operator.is_empty() && age < grace && age > -grace {
            served.insert(operator.to_string());
        }
    }
    Some(served)
}

/// One operator's buckets on this replica: which are open to reconciles, the reconciles in
/// flight per bucket, and whom to tell when one is gained.
pub struct OperatorShard {
    operator: String,
    buckets: u32,
    state: Mutex<ShardState>,
    /// The operator's resources as its controller watches them (the weights).
    store: Mutex<Option<Store<DynamicObject>>>,
    /// When its controller began listing the resources (created, or a store attached).
    listing_since: Mutex<jiff::Timestamp>,
    gained: Mutex<Vec<futures::channel::mpsc::UnboundedSender<()>>>,
}

#[derive(Default)]
struct ShardState {
    open: BTreeSet<u32>,
    in_flight: HashMap<u32, usize>,
    /// Buckets gained while the operator's controller ran (from another replica, or unheld):
    /// when, and the resources visited since (a settled resource's first visit is deferred).
    handed_over: HashMap<u32, Handover>,
}

/// A bucket gained while the operator's controller ran.
struct Handover {
    /// Until when its resources wait (see [`HANDOVER_SETTLE`]).
    settles_at: Instant,
    visited: std::collections::HashSet<String>,
}

/// How long after another replica released a bucket its resources are not decided here: the
/// previous holder's last writes (an output applied, then the resource's status) come to this
/// replica on one watch per kind, each at its own lag, so a resource's status can arrive
/// before the outputs it records and a decision then reads them as missing (AutoRoute's Ready
/// went back to Syncing during a rolling update). A bucket whose holder expired long ago, or
/// one never held, is decided at once. 3 s was too short on a loaded 2-core cluster during a
/// rolling update (a bucket acquired 3.8 s after its release still read a Gateway as missing).
pub const HANDOVER_SETTLE: Duration = Duration::from_secs(5);

/// A reconcile in progress in a bucket; the bucket's release waits for it.
pub struct BucketGuard {
    shard: Arc<OperatorShard>,
    bucket: u32,
    /// The first visit of this resource since its bucket was handed to this replica while
    /// the controller ran: the previous holder may have done the work already.
    pub first_after_handover: bool,
    /// The bucket was gained this recently: the time left of its [`HANDOVER_SETTLE`], after
    /// which the resource is to be decided (not a visit yet).
    pub settling: Option<Duration>,
}

impl Drop for BucketGuard {
    fn drop(&mut self) {
        let mut state = self.shard.lock();
        if let Some(n) = state.in_flight.get_mut(&self.bucket) {
            *n = n.saturating_sub(1);
        }
    }
}

impl OperatorShard {
    fn new(operator: &str, buckets: u32) -> Self {
        OperatorShard {
            operator: operator.to_string(),
            buckets: buckets.max(1),
            state: Mutex::default(),
            store: Mutex::default(),
            listing_since: Mutex::new(jiff::Timestamp::now()),
            gained: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ShardState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn operator(&self) -> &str {
        &self.operator
    }

    /// The bucket of a resource of this operator.
    pub fn bucket(&self, obj: &DynamicObject) -> u32 {
        bucket_of(obj.namespace().as_deref(), &obj.name_any(), self.buckets)
    }

    /// Admits a reconcile of `obj` if its bucket is open here; `None`: another replica's (or
    /// nobody's yet), so this one must not touch it.
    pub fn enter(self: &Arc<Self>, obj: &DynamicObject) -> Option<BucketGuard> {
        let bucket = self.bucket(obj);
        let mut state = self.lock();
        if !state.open.contains(&bucket) {
            return None;
        }
        *state.in_flight.entry(bucket).or_insert(0) += 1;
        let now = Instant::now();
        let (first_after_handover, settling) = match state.handed_over.get_mut(&bucket) {
            Some(handover) if now < handover.settles_at => (false, Some(handover.settles_at - now)),
            Some(handover) => (
                handover
                    .visited
                    .insert(obj.uid().unwrap_or_else(|| obj.name_any())),
                None,
            ),
            None => (false, None),
        };
        Some(BucketGuard {
            shard: self.clone(),
            bucket,
            first_after_handover,
            settling,
        })
    }

    /// A stream that yields whenever this replica gains a bucket of the operator (its
    /// controller then reconciles what it holds: the others are skipped at once).
    pub fn gains(&self) -> futures::channel::mpsc::UnboundedReceiver<()> {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let mut gained = self.gained.lock().unwrap_or_else(|p| p.into_inner());
        gained.retain(|s| !s.is_closed());
        gained.push(tx);
        rx
    }

    /// The controller's store of the operator's resources, for the buckets' weights. A
    /// controller (re)starting reconciles every resource it holds: nothing counts as handed over.
    pub fn attach_store(&self, store: Store<DynamicObject>) {
        *self.store.lock().unwrap_or_else(|p| p.into_inner()) = Some(store);
        *self.listing_since.lock().unwrap_or_else(|p| p.into_inner()) = jiff::Timestamp::now();
        self.lock().handed_over.clear();
    }

    /// While its controller lists the resources (no weights yet): since when.
    fn loading_since(&self) -> Option<jiff::Timestamp> {
        if self.is_listed() {
            return None;
        }
        Some(*self.listing_since.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Whether the controller's store holds its first listing (the weights can be counted).
    fn is_listed(&self) -> bool {
        let store = self.store.lock().unwrap_or_else(|p| p.into_inner()).clone();
        store.is_some_and(|store| {
            futures::FutureExt::now_or_never(store.wait_until_ready()).is_some_and(|r| r.is_ok())
        })
    }

    /// How many resources the controller's store holds (`None` without a store).
    fn store_len(&self) -> Option<usize> {
        self.store
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(Store::len)
    }

    /// Resources per bucket, from the controller's store; `None` until its first listing is
    /// in (the assignment would be made on wrong weights, then moved).
    fn weights(&self) -> Option<Vec<u64>> {
        if !self.is_listed() {
            return None;
        }
        let store = self
            .store
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()?;
        let mut weights = vec![0u64; self.buckets as usize];
        for obj in store.state() {
            if let Some(w) = weights.get_mut(self.bucket(&obj) as usize) {
                *w += 1;
            }
        }
        Some(weights)
    }

    fn is_open(&self, bucket: u32) -> bool {
        self.lock().open.contains(&bucket)
    }

    /// The buckets open to reconciles here.
    pub fn open_buckets(&self) -> Vec<u32> {
        self.lock().open.iter().copied().collect()
    }

    /// Opens `bucket` to reconciles, its resources decided once `settle` has passed.
    fn open(&self, bucket: u32, settle: Duration) {
        {
            let mut state = self.lock();
            state.open.insert(bucket);
            state.handed_over.insert(
                bucket,
                Handover {
                    settles_at: Instant::now() + settle,
                    visited: Default::default(),
                },
            );
        }
        let mut gained = self.gained.lock().unwrap_or_else(|p| p.into_inner());
        gained.retain(|s| s.unbounded_send(()).is_ok());
    }

    /// Closes `bucket` to new reconciles; true once none is in flight there.
    fn close(&self, bucket: u32) -> bool {
        let mut state = self.lock();
        state.open.remove(&bucket);
        state.handed_over.remove(&bucket);
        state.in_flight.get(&bucket).copied().unwrap_or(0) == 0
    }

    /// Closes `bucket` and waits (at most `grace`) for its reconciles in flight.
    async fn drain(&self, bucket: u32, grace: Duration) -> bool {
        let start = Instant::now();
        loop {
            if self.close(bucket) {
                return true;
            }
            if start.elapsed() >= grace {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A replica's share as last written to an operator's status: its buckets, the resources in
/// them, the members then, and when.
type Reported = (Vec<u32>, u64, BTreeSet<String>, Instant);

/// An operator's assignment as the last round computed it, to tell between rounds whether new
/// resources would move a bucket (then the next round comes at once, not a renewal later).
struct Plan {
    members: Vec<String>,
    views: Vec<BucketView>,
    /// Per bucket, the weight its Lease recorded (a floor under the store's count).
    recorded: Vec<u64>,
    target: Vec<String>,
    /// The store's size when last looked at: unchanged, the weights are taken as unchanged.
    store_len: usize,
}

impl Plan {
    /// Whether `weights` (resources per bucket, from the store) assign some bucket elsewhere
    /// than this plan did, with the same members and holders.
    fn moved_by(&self, weights: &[u64]) -> bool {
        let views: Vec<BucketView> = self
            .views
            .iter()
            .map(|v| BucketView {
                weight: weights
                    .get(v.bucket as usize)
                    .copied()
                    .unwrap_or(0)
                    .max(self.recorded.get(v.bucket as usize).copied().unwrap_or(0)),
                ..v.clone()
            })
            .collect();
        assign(&self.members, &views) != self.target
    }
}

/// How often, between rounds, the stores are looked at for weights that move a bucket.
const WEIGHT_POLL: Duration = Duration::from_millis(500);
/// Between rounds while a bucket assigned here is still held elsewhere (its holder is draining
/// it): how soon to look again, rather than a whole renewal later.
const HANDOVER_POLL: Duration = Duration::from_secs(1);

/// This replica's side of the scheme: its identity, the operators it runs, the Leases it holds.
pub struct Sharding {
    api: Api<Lease>,
    /// WasmOperators, whose `status.sharding` each replica keeps its own entry of.
    operators_api: Api<crate::crd::WasmOperator>,
    /// Per operator: the share last written to its status, and when.
    reported: tokio::sync::Mutex<BTreeMap<String, Reported>>,
    /// The manager's WasmOperator cache: an entry of ours another replica removed (it did not
    /// yet see us as a member) is seen missing there and written again.
    operators_cache: std::sync::OnceLock<Store<crate::crd::WasmOperator>>,
    /// The buckets held for any operator: what the watch caches keep.
    cache_scope: Arc<CacheScope>,
    identity: String,
    buckets: u32,
    timing: LeaseTiming,
    operators: Mutex<BTreeMap<String, Weak<OperatorShard>>>,
    /// Bucket Leases held, per operator: bucket → when last renewed.
    held: tokio::sync::Mutex<BTreeMap<String, BTreeMap<u32, Instant>>>,
    /// Per operator, the last round's assignment.
    plans: Mutex<HashMap<String, Plan>>,
    /// What the member Lease last written announces (see [`Sharding::announcement`]).
    announced: Mutex<(String, String)>,
}

impl Sharding {
    pub fn new(
        client: Client,
        namespace: &str,
        identity: &str,
        buckets: u32,
        timing: LeaseTiming,
    ) -> Self {
        Sharding {
            operators_api: Api::all(client.clone()),
            reported: tokio::sync::Mutex::default(),
            operators_cache: std::sync::OnceLock::new(),
            cache_scope: Arc::new(CacheScope::new(buckets)),
            api: Api::namespaced(client, namespace),
            identity: identity.to_string(),
            buckets: buckets.max(1),
            timing,
            operators: Mutex::default(),
            held: tokio::sync::Mutex::default(),
            plans: Mutex::default(),
            announced: Mutex::default(),
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// What the watch caches of this replica keep: the namespaces of the buckets it holds.
    pub fn cache_scope(&self) -> Arc<CacheScope> {
        self.cache_scope.clone()
    }

    /// The caches keep the buckets held for any operator.
    fn publish_scope(&self, held: &BTreeMap<String, BTreeMap<u32, Instant>>) {
        self.cache_scope
            .set(held.values().flat_map(|m| m.keys().copied()).collect());
    }

    /// Hands over the manager's WasmOperator cache (once; later calls are ignored).
    pub fn attach_operators(&self, cache: Store<crate::crd::WasmOperator>) {
        let _ = self.operators_cache.set(cache);
    }

    /// This replica's entry of `operator`'s `status.sharding` as the cache holds it (`None`
    /// without a cache: then the entry is taken to be as last written).
    fn cached_entry(&self, operator: &str) -> Option<Option<crate::crd::ReplicaShare>> {
        let cache = self.operators_cache.get()?;
        let op = cache.get(&kube::runtime::reflector::ObjectRef::new(operator))?;
        Some(
            op.status
                .as_ref()
                .and_then(|s| s.sharding.as_ref())
                .and_then(|s| s.replicas.get(&self.identity).cloned()),
        )
    }

    /// The shard of operator `name`: shared by its controllers (a swapped definition keeps it).
    pub fn operator(&self, name: &str) -> Arc<OperatorShard> {
        let mut operators = self.operators.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(shard) = operators.get(name).and_then(Weak::upgrade) {
            return shard;
        }
        let shard = Arc::new(OperatorShard::new(name, self.buckets));
        operators.insert(name.to_string(), Arc::downgrade(&shard));
        crate::metrics::READINESS.buckets_not_balanced(name);
        shard
    }

    fn live_operators(&self) -> (Vec<Arc<OperatorShard>>, Vec<String>) {
        let mut operators = self.operators.lock().unwrap_or_else(|p| p.into_inner());
        let mut live = Vec::new();
        let mut gone = Vec::new();
        operators.retain(|name, shard| match shard.upgrade() {
            Some(s) => {
                live.push(s);
                true
            }
            None => {
                gone.push(name.clone());
                false
            }
        });
        (live, gone)
    }

    /// Renews, acquires and releases until dropped (the caller aborts it on shutdown, then
    /// calls [`Sharding::release_all`]).
    pub async fn run(self: Arc<Self>) {
        loop {
            let started = Instant::now();
            let pending = match self.tick().await {
                Ok(pending) => pending,
                Err(e) => {
                    tracing::warn!(error = %crate::error_report::Brief(&e), "could not list or write bucket Leases; retrying");
                    0
                }
            };
            // Rounds start every `renew_every`, however long the last one took: a Lease's
            // renewals stay that far apart, well inside its duration. Sooner when resources
            // arriving would move a bucket (a burst of new resources is shared while it is
            // worked through, not a renewal later), or while a bucket assigned here is being
            // handed over.
            loop {
                let elapsed = started.elapsed();
                if elapsed >= self.timing.renew_every
                    || (pending > 0 && elapsed >= HANDOVER_POLL)
                    || (elapsed >= WEIGHT_POLL
                        && (self.announcement_changed() || self.assignment_moved()))
                {
                    break;
                }
                tokio::time::sleep(WEIGHT_POLL.min(self.timing.renew_every - elapsed)).await;
            }
        }
    }

    /// The operators this replica serves and those it is loading (`name@since`), as its member
    /// Lease announces them.
    fn announcement(&self) -> (String, String) {
        let (live, _) = self.live_operators();
        let mut serving: Vec<&str> = Vec::new();
        let mut loading: Vec<String> = Vec::new();
        for shard in &live {
            match shard.loading_since() {
                None => serving.push(&shard.operator),
                Some(since) => loading.push(format!("{}@{}", shard.operator, since.as_second())),
            }
        }
        (serving.join(","), loading.join(","))
    }

    /// Whether what the member Lease announces is out of date (an operator loaded or listed
    /// since): the others should learn it now, not a renewal later — until then they take
    /// this replica's share of that operator.
    fn announcement_changed(&self) -> bool {
        let announced = self.announced.lock().unwrap_or_else(|p| p.into_inner());
        *announced != self.announcement()
    }

    /// Whether the resources now in the stores would assign some operator's bucket elsewhere
    /// than the last round did (its Leases as then listed). Only stores whose size changed are
    /// counted again.
    fn assignment_moved(&self) -> bool {
        let (live, _) = self.live_operators();
        let mut plans = self.plans.lock().unwrap_or_else(|p| p.into_inner());
        for shard in live {
            let Some(plan) = plans.get_mut(&shard.operator) else {
                continue;
            };
            let Some(len) = shard.store_len() else {
                continue;
            };
            if len == plan.store_len {
                continue;
            }
            plan.store_len = len;
            let Some(weights) = shard.weights() else {
                continue;
            };
            if plan.moved_by(&weights) {
                return true;
            }
        }
        false
    }

    /// Per bucket number, its [`usual_holder`] among `members` over the operators in `live`
    /// (`None`: no member holds it for any).
    fn usual_holders(
        &self,
        leases: &HashMap<String, Lease>,
        live: &[Arc<OperatorShard>],
        members: &[String],
        now: jiff::Timestamp,
    ) -> Vec<Option<String>> {
        (0..self.buckets)
            .map(|b| {
                usual_holder(live.iter().filter_map(|shard| {
                    leases
                        .get(&bucket_lease_name(&shard.operator, b))
                        .and_then(|l| l.spec.as_ref())
                        .filter(|s| !self.lease_expired(s, now))
                        .and_then(|s| s.holder_identity.as_deref())
                        .filter(|h| members.iter().any(|m| m == h))
                }))
            })
            .collect()
    }

    fn lease_expired(&self, spec: &LeaseSpec, now: jiff::Timestamp) -> bool {
        let Some(MicroTime(renewed)) = spec.renew_time else {
            return true;
        };
        let secs = spec
            .lease_duration_seconds
            .map(i64::from)
            .unwrap_or(self.timing.lease_duration.as_secs() as i64);
        renewed
            .checked_add(jiff::SignedDuration::from_secs(secs))
            .map(|until| until < now)
            .unwrap_or(true)
    }

    fn duration_secs(&self) -> i32 {
        i32::try_from(self.timing.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }

    /// One round: member Lease renewed, then per operator the assignment computed and followed.
    /// Returns how many buckets are assigned here but not yet held.
    pub async fn tick(&self) -> Result<usize, kube::Error> {
        let now = jiff::Timestamp::now();
        let leases = self
            .api
            .list(&ListParams::default().labels(LEASE_ROLE_LABEL))
            .await?;
        let by_name: HashMap<String, Lease> = leases
            .items
            .into_iter()
            .map(|l| (l.name_any(), l))
            .collect();
        let (live, gone) = self.live_operators();
        let own = by_name.get(&member_lease_name(&self.identity));
        // Operators this replica had announced before this round: only their free buckets
        // are taken. One just loaded is announced first, so the replicas that loaded it at
        // about the same time see each other before any takes buckets of it.
        let announced_before = own
            .filter(|l| l.spec.as_ref().is_some_and(|s| !self.lease_expired(s, now)))
            .and_then(|l| served_by(l.annotations(), now, Duration::MAX))
            .unwrap_or_default();
        let announcement = self.announcement();
        if self
            .renew_member(own, &announcement.0, &announcement.1, now)
            .await?
        {
            *self.announced.lock().unwrap_or_else(|p| p.into_inner()) = announcement;
        }
        let mut members = vec![self.identity.clone()];
        // Per member, the operators it serves (`None`: an older replica's Lease, all of them).
        let mut serves: HashMap<String, Option<BTreeSet<String>>> = HashMap::new();
        let mut mismatched = Vec::new();
        for lease in by_name.values() {
            if lease.labels().get(LEASE_ROLE_LABEL).map(String::as_str) != Some("member") {
                continue;
            }
            if !is_replicas_own(lease) {
                tracing::warn!(lease = %lease.name_any(), "ignored a Lease labelled as a replica's member Lease: not a replica's own (named after another holder, or written by an operator)");
                continue;
            }
            let Some(spec) = &lease.spec else { continue };
            let Some(holder) = spec.holder_identity.clone() else {
                continue;
            };
            if holder == self.identity || self.lease_expired(spec, now) {
                continue;
            }
            if lease.labels().get(BUCKETS_LABEL) != Some(&self.buckets.to_string()) {
                mismatched.push(holder.clone());
            }
            serves.insert(
                holder.clone(),
                served_by(lease.annotations(), now, self.timing.lease_duration),
            );
            members.push(holder);
        }
        members.sort();
        if !mismatched.is_empty() {
            tracing::error!(replicas = ?mismatched, buckets = self.buckets, "replicas use another number of buckets (--buckets): acquiring nothing until they agree");
        }
        for name in gone {
            crate::metrics::READINESS.buckets_pending(&name, 0);
            self.release_operator(&name, None).await;
        }
        let usual = self.usual_holders(&by_name, &live, &members, now);
        let mut pending = 0;
        for shard in live {
            let serving: Vec<String> = members
                .iter()
                .filter(|m| {
                    **m == self.identity
                        || serves
                            .get(*m)
                            .is_none_or(|s| s.as_ref().is_none_or(|s| s.contains(&shard.operator)))
                })
                .cloned()
                .collect();
            let may_acquire = mismatched.is_empty() && announced_before.contains(&shard.operator);
            pending += self
                .follow(&shard, &by_name, &serving, &usual, may_acquire, now)
                .await;
        }
        Ok(pending)
    }

    /// Writes this replica's member Lease: renewed, with the operators it serves and loads.
    /// False when the Lease changed since it was listed (409), so nothing was written.
    async fn renew_member(
        &self,
        current: Option<&Lease>,
        serving: &str,
        loading: &str,
        now: jiff::Timestamp,
    ) -> Result<bool, kube::Error> {
        let name = member_lease_name(&self.identity);
        let mut lease = current.cloned().unwrap_or_else(|| Lease {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            spec: None,
        });
        let labels = lease.metadata.labels.get_or_insert_with(Default::default);
        labels.insert(LEASE_ROLE_LABEL.into(), "member".into());
        labels.insert(BUCKETS_LABEL.into(), self.buckets.to_string());
        let annotations = lease
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        annotations.insert(SERVES_ANNOTATION.into(), serving.to_string());
        annotations.insert(LOADING_ANNOTATION.into(), loading.to_string());
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(&self.identity) {
            spec.holder_identity = Some(self.identity.clone());
            spec.acquire_time = Some(MicroTime(now));
        }
        spec.renew_time = Some(MicroTime(now));
        spec.lease_duration_seconds = Some(self.duration_secs());
        let params = PostParams {
            field_manager: Some(MEMBER_MANAGER.into()),
            ..Default::default()
        };
        let result = match current {
            Some(_) => self.api.replace(&name, &params, &lease).await,
            None => self.api.create(&params, &lease).await,
        };
        match result {
            Ok(_) => Ok(true),
            // Changed since it was listed (our own previous round's write, a moment ago): the
            // next round renews it. Its announcement is not written, so that round comes early.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Follows the assignment for one operator's buckets.
    async fn follow(
        &self,
        shard: &Arc<OperatorShard>,
        leases: &HashMap<String, Lease>,
        members: &[String],
        usual: &[Option<String>],
        may_acquire: bool,
        now: jiff::Timestamp,
    ) -> usize {
        let store_len = shard.store_len().unwrap_or(0);
        let Some(weights) = shard.weights() else {
            // Its controller has not listed the resources yet: decide next round. Renew what
            // is held meanwhile.
            self.renew_only(shard, leases, now).await;
            return 0;
        };
        let views: Vec<BucketView> = (0..self.buckets)
            .map(|b| {
                let lease = leases.get(&bucket_lease_name(&shard.operator, b));
                // Every replica watches every resource today, so its own count is current;
                // the holder's count recorded in the Lease covers a lagging watch.
                let recorded = recorded_weight(lease);
                let weight = weights.get(b as usize).copied().unwrap_or(0).max(recorded);
                let holder = lease
                    .and_then(|l| l.spec.as_ref())
                    .filter(|s| !self.lease_expired(s, now))
                    .and_then(|s| s.holder_identity.clone())
                    .filter(|h| members.contains(h));
                BucketView {
                    bucket: b,
                    weight,
                    holder,
                }
            })
            .collect();
        // Assigned as if each bucket were held where that bucket number usually is: the
        // same number goes to the same replica for every operator (within its share).
        let assigning: Vec<BucketView> = views
            .iter()
            .map(|v| BucketView {
                holder: usual
                    .get(v.bucket as usize)
                    .cloned()
                    .flatten()
                    .filter(|h| members.contains(h))
                    .or_else(|| v.holder.clone()),
                ..v.clone()
            })
            .collect();
        let target = assign(members, &assigning);
        self.plans.lock().unwrap_or_else(|p| p.into_inner()).insert(
            shard.operator.clone(),
            Plan {
                members: members.to_vec(),
                views: assigning,
                recorded: (0..self.buckets)
                    .map(|b| recorded_weight(leases.get(&bucket_lease_name(&shard.operator, b))))
                    .collect(),
                target: target.clone(),
                store_len,
            },
        );
        let mut held = self.held.lock().await;
        let mine = held.entry(shard.operator.clone()).or_default();
        for view in &views {
            let b = view.bucket;
            let name = bucket_lease_name(&shard.operator, b);
            let weight = weights.get(b as usize).copied().unwrap_or(0);
            let assigned = target.get(b as usize) == Some(&self.identity);
            let holding = mine.contains_key(&b);
            if holding && view.holder.as_deref() != Some(&self.identity) {
                // Our Lease expired or was taken: stop at once.
                shard.close(b);
                mine.remove(&b);
                tracing::warn!(operator = %shard.operator, bucket = b, holder = ?view.holder, "lost a bucket Lease");
                continue;
            }
            match (assigned, holding) {
                // Renewed less than half a renewal ago (a round brought forward): not again.
                (true, true)
                    if shard.is_open(b)
                        && mine
                            .get(&b)
                            .is_some_and(|t| t.elapsed() < self.timing.renew_every / 2) => {}
                (true, true) => match self
                    .write(leases.get(&name), &shard.operator, b, weight, now)
                    .await
                {
                    Ok(()) => {
                        mine.insert(b, Instant::now());
                        // Closed for a release that did not drain in time, then assigned here
                        // again: open it back.
                        if !shard.is_open(b) {
                            shard.open(b, Duration::ZERO);
                        }
                    }
                    Err(e) => {
                        let stale = mine
                            .get(&b)
                            .is_none_or(|t| t.elapsed() >= self.timing.lease_duration * 2 / 3);
                        if conflict(&e) || stale {
                            shard.close(b);
                            mine.remove(&b);
                            tracing::warn!(operator = %shard.operator, bucket = b, error = %crate::error_report::Brief(&e), "could not renew a bucket Lease: stopped reconciling there");
                        }
                    }
                },
                // Free, or held under this identity by an earlier process (a restart): acquire.
                (true, false)
                    if may_acquire && view.holder.as_ref().is_none_or(|h| *h == self.identity) =>
                {
                    match self
                        .write(leases.get(&name), &shard.operator, b, weight, now)
                        .await
                    {
                        Ok(()) => {
                            mine.insert(b, Instant::now());
                            let settle = settle_after_release(leases.get(&name), now);
                            shard.open(b, settle);
                            tracing::info!(operator = %shard.operator, bucket = b, settle_ms = settle.as_millis() as u64, "acquired a bucket");
                        }
                        Err(e) if conflict(&e) => {}
                        Err(e) => {
                            tracing::warn!(operator = %shard.operator, bucket = b, error = %crate::error_report::Brief(&e), "could not acquire a bucket Lease")
                        }
                    }
                }
                (false, true) => {
                    // Bounded, so the other Leases are renewed in time; still busy: next round.
                    let grace = self.timing.renew_every.min(Duration::from_secs(2));
                    if shard.drain(b, grace).await {
                        self.release(leases.get(&name), weight).await;
                        mine.remove(&b);
                        tracing::info!(operator = %shard.operator, bucket = b, to = ?target.get(b as usize), "released a bucket");
                    } else {
                        // Reconciles still running: keep it (renewed, closed) and try again.
                        let _ = self
                            .write(leases.get(&name), &shard.operator, b, weight, now)
                            .await;
                    }
                }
                _ => {}
            }
        }
        let labels = crate::metrics::OperatorLabels {
            operator: shard.operator.clone(),
        };
        crate::metrics::METRICS
            .buckets_held
            .get_or_create(&labels)
            .set(mine.len() as i64);
        crate::metrics::METRICS
            .buckets
            .get_or_create(&labels)
            .set(i64::from(self.buckets));
        let mine: Vec<u32> = mine.keys().copied().collect();
        // Ready once every bucket assigned here is held (and, past a handover, drained to us).
        let pending = target
            .iter()
            .enumerate()
            .filter(|(b, m)| *m == &self.identity && !mine.contains(&(*b as u32)))
            .count();
        self.publish_scope(&held);
        drop(held);
        let resources: u64 = mine
            .iter()
            .map(|b| weights.get(*b as usize).copied().unwrap_or(0))
            .sum();
        self.report(&shard.operator, mine, resources, members).await;
        crate::metrics::READINESS.buckets_pending(&shard.operator, pending);
        pending
    }

    /// Keeps this replica's entry of the operator's `status.sharding` current: written when the
    /// buckets it holds or the members change, or its resource count after a minute; entries
    /// of replicas that are no longer members are removed.
    async fn report(&self, operator: &str, held: Vec<u32>, resources: u64, members: &[String]) {
        let members: BTreeSet<String> = members.iter().cloned().collect();
        let mut reported = self.reported.lock().await;
        let cached = self.cached_entry(operator);
        if !report_due(
            reported.get(operator),
            &held,
            resources,
            &members,
            cached,
            self.timing.lease_duration,
        ) {
            return;
        }
        let listed: Vec<String> = match self.operators_api.get_opt(operator).await {
            Ok(Some(op)) => op
                .status
                .and_then(|s| s.sharding)
                .map(|s| s.replicas.into_keys().collect())
                .unwrap_or_default(),
            Ok(None) => return,
            Err(e) => {
                tracing::debug!(operator, error = %crate::error_report::Brief(&e), "could not read the WasmOperator's sharding status");
                Vec::new()
            }
        };
        let gone: Vec<String> = listed
            .into_iter()
            .filter(|r| !members.contains(r))
            .collect();
        let patch = sharding_patch(&self.identity, self.buckets, &held, resources, &gone);
        match self
            .operators_api
            .patch_status(
                operator,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => {
                reported.insert(
                    operator.to_string(),
                    (held, resources, members, Instant::now()),
                );
            }
            Err(e) => {
                tracing::warn!(operator, error = %crate::error_report::Brief(&e), "could not write the WasmOperator's sharding status")
            }
        }
    }

    /// Renews the Leases of `shard` this replica holds, nothing else.
    async fn renew_only(
        &self,
        shard: &Arc<OperatorShard>,
        leases: &HashMap<String, Lease>,
        now: jiff::Timestamp,
    ) {
        let held: Vec<u32> = {
            let held = self.held.lock().await;
            held.get(&shard.operator)
                .map(|m| m.keys().copied().collect())
                .unwrap_or_default()
        };
        for b in held {
            let name = bucket_lease_name(&shard.operator, b);
            let weight = recorded_weight(leases.get(&name));
            if let Err(e) = self
                .write(leases.get(&name), &shard.operator, b, weight, now)
                .await
            {
                tracing::warn!(operator = %shard.operator, bucket = b, error = %crate::error_report::Brief(&e), "could not renew a bucket Lease");
            } else if let Some(m) = self.held.lock().await.get_mut(&shard.operator) {
                m.insert(b, Instant::now());
            }
        }
    }

    /// Creates, takes or renews bucket Lease `bucket` for this replica (conditional on the
    /// resourceVersion listed), recording `weight`.
    async fn write(
        &self,
        current: Option<&Lease>,
        operator: &str,
        bucket: u32,
        weight: u64,
        now: jiff::Timestamp,
    ) -> Result<(), kube::Error> {
        let name = bucket_lease_name(operator, bucket);
        let mut lease = current.cloned().unwrap_or_else(|| Lease {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            spec: None,
        });
        let labels = lease.metadata.labels.get_or_insert_with(Default::default);
        labels.insert(LEASE_ROLE_LABEL.into(), "bucket".into());
        labels.insert(crate::OPERATOR_LABEL.into(), operator_label_value(operator));
        labels.insert(BUCKET_LABEL.into(), bucket.to_string());
        let annotations = lease
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        annotations.insert(WEIGHT_ANNOTATION.into(), weight.to_string());
        annotations.insert(OPERATOR_ANNOTATION.into(), operator.to_string());
        // Stamped when written, not when the round began: a long round must not age the Lease.
        let now = jiff::Timestamp::now().max(now);
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(&self.identity) {
            spec.holder_identity = Some(self.identity.clone());
            spec.acquire_time = Some(MicroTime(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.renew_time = Some(MicroTime(now));
        spec.lease_duration_seconds = Some(self.duration_secs());
        match current {
            Some(_) => {
                self.api
                    .replace(&name, &PostParams::default(), &lease)
                    .await
            }
            None => self.api.create(&PostParams::default(), &lease).await,
        }
        .map(|_| ())
    }

    /// Gives a held bucket Lease up (holder cleared, weight kept for the next holder).
    async fn release(&self, current: Option<&Lease>, weight: u64) {
        let Some(mut lease) = current.cloned() else {
            return;
        };
        let name = lease.name_any();
        lease
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(WEIGHT_ANNOTATION.into(), weight.to_string());
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if spec.holder_identity.as_deref() != Some(&self.identity) {
            return;
        }
        spec.holder_identity = None;
        // When it was released: its next holder lets this replica's last writes reach its
        // watches first (`settle_after_release`).
        spec.renew_time = Some(MicroTime(jiff::Timestamp::now()));
        if let Err(e) = self
            .api
            .replace(&name, &PostParams::default(), &lease)
            .await
        {
            tracing::warn!(lease = %name, error = %crate::error_report::Brief(&e), "could not release a bucket Lease (it expires)");
        }
    }

    /// Releases every bucket of `operator` this replica holds (after draining, when its shard
    /// is still alive), e.g. when the operator stops.
    async fn release_operator(&self, operator: &str, shard: Option<&Arc<OperatorShard>>) {
        let buckets: Vec<u32> = {
            let mut held = self.held.lock().await;
            held.remove(operator)
                .map(|m| m.into_keys().collect())
                .unwrap_or_default()
        };
        for b in buckets {
            if let Some(shard) = shard {
                shard.drain(b, self.timing.renew_every).await;
            }
            let name = bucket_lease_name(operator, b);
            if let Ok(Some(lease)) = self.api.get_opt(&name).await {
                let weight = recorded_weight(Some(&lease));
                self.release(Some(&lease), weight).await;
            }
        }
        self.publish_scope(&*self.held.lock().await);
        // The last assignment goes too: a returning operator starts from a new round.
        self.plans
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(operator);
        // This replica's entry of the operator's status goes with its buckets.
        if self.reported.lock().await.remove(operator).is_some() {
            let patch = serde_json::json!({"status": {"sharding": {"replicas": {self.identity.clone(): null}}}});
            let _ = self
                .operators_api
                .patch_status(
                    operator,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&patch),
                )
                .await;
        }
        let labels = crate::metrics::OperatorLabels {
            operator: operator.to_string(),
        };
        crate::metrics::METRICS.buckets_held.remove(&labels);
        crate::metrics::METRICS.buckets.remove(&labels);
        crate::metrics::READINESS.buckets_pending(operator, 0);
    }

    /// On shutdown, after the controllers stopped: every bucket released and the member Lease
    /// deleted, so the other replicas take over at once rather than after the Lease duration.
    pub async fn release_all(&self) {
        let (live, gone) = self.live_operators();
        for shard in &live {
            self.release_operator(&shard.operator, Some(shard)).await;
        }
        for name in gone {
            self.release_operator(&name, None).await;
        }
        let held: Vec<String> = self.held.lock().await.keys().cloned().collect();
        for name in held {
            self.release_operator(&name, None).await;
        }
        let _ = self
            .api
            .delete(&member_lease_name(&self.identity), &Default::default())
            .await;
        tracing::info!(identity = %self.identity, "released every bucket");
    }
}

/// How long a bucket acquired now waits before its resources are decided: what is left of
/// [`HANDOVER_SETTLE`] since a replica released its `lease` (a released Lease has no holder and
/// its release time as `renewTime`); nothing for a Lease new, expired or held before by this
/// identity. A release time ahead of this replica's clock counts as now.
fn settle_after_release(lease: Option<&Lease>, now: jiff::Timestamp) -> Duration {
    let Some(spec) = lease.and_then(|l| l.spec.as_ref()) else {
        return Duration::ZERO;
    };
    let (None, Some(MicroTime(released))) = (&spec.holder_identity, &spec.renew_time) else {
        return Duration::ZERO;
    };
    let ago = now
        .duration_since(*released)
        .max(jiff::SignedDuration::ZERO)
        .unsigned_abs();
    HANDOVER_SETTLE.saturating_sub(ago)
}

/// The merge patch of a WasmOperator's `status.sharding` that sets this replica's entry and
/// removes those of replicas `gone`.
pub fn sharding_patch(
    identity: &str,
    buckets: u32,
    held: &[u32],
    resources: u64,
    gone: &[String],
) -> serde_json::Value {
    let mut replicas = serde_json::Map::new();
    for r in gone {
        replicas.insert(r.clone(), serde_json::Value::Null);
    }
    replicas.insert(
        identity.to_string(),
        serde_json::json!({"buckets": held, "resources": resources}),
    );
    serde_json::json!({"status": {"sharding": {"buckets": buckets, "replicas": replicas}}})
}

/// Whether this replica's entry of an operator's `status.sharding` is to be written: never
/// written, its buckets or the members changed, its resource count changed over a minute ago,
/// or the entry is missing from (or differs in) the cached status a lease duration after the
/// last write (another replica that did not yet see this one as a member removed it).
fn report_due(
    last: Option<&Reported>,
    held: &[u32],
    resources: u64,
    members: &BTreeSet<String>,
    cached: Option<Option<crate::crd::ReplicaShare>>,
    lease_duration: Duration,
) -> bool {
    let Some((buckets, count, known, at)) = last else {
        return true;
    };
    let fresh = at.elapsed() < Duration::from_secs(60) || *count == resources;
    let intact = at.elapsed() < lease_duration
        || cached.is_none_or(|e| e.is_some_and(|e| e.buckets == *buckets));
    !(buckets.as_slice() == held && known == members && fresh && intact)
}

/// The resources a bucket Lease's last holder recorded in it (0 when none or unreadable).
fn recorded_weight(lease: Option<&Lease>) -> u64 {
    lease
        .and_then(|l| l.annotations().get(WEIGHT_ANNOTATION))
        .and_then(|w| w.parse().ok())
        .unwrap_or(0)
}

/// The member holding one bucket number for the most operators (ties: first by name), from
/// each operator's holder of it. Each operator's assignment treats it as that bucket's holder,
/// so a replica holds the same buckets — the same namespaces — of every operator, and its
/// caches keep a share of them rather than the union of differently placed shares.
fn usual_holder<'a>(holders: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for h in holders {
        *counts.entry(h).or_default() += 1;
    }
    counts
        .into_iter()
        .max_by_key(|(h, n)| (*n, std::cmp::Reverse(*h)))
        .map(|(h, _)| h.to_string())
}

fn conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn views(weights: &[u64], holders: &[Option<&str>]) -> Vec<BucketView> {
        weights
            .iter()
            .zip(holders)
            .enumerate()
            .map(|(i, (w, h))| BucketView {
                bucket: i as u32,
                weight: *w,
                holder: h.map(str::to_string),
            })
            .collect()
    }

    /// `buckets` as held where `target` assigned them.
    fn held_as(buckets: &[BucketView], target: &[String]) -> Vec<BucketView> {
        buckets
            .iter()
            .zip(target)
            .map(|(b, m)| BucketView {
                holder: Some(m.clone()),
                ..b.clone()
            })
            .collect()
    }

    fn members(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    fn loads(target: &[String], buckets: &[BucketView]) -> BTreeMap<String, u64> {
        let mut load = BTreeMap::new();
        for (m, b) in target.iter().zip(buckets) {
            *load.entry(m.clone()).or_insert(0) += b.weight + 1;
        }
        load
    }

    #[test]
    fn a_member_listing_an_operator_counts_for_one_lease_duration() {
        let now = jiff::Timestamp::from_second(1_800_000_000).expect("a valid time");
        let grace = Duration::from_secs(15);
        let annotations = |serves: &str, loading: &str| {
            BTreeMap::from([
                (SERVES_ANNOTATION.to_string(), serves.to_string()),
                (LOADING_ANNOTATION.to_string(), loading.to_string()),
            ])
        };
        let set = |names: &[&str]| -> Option<BTreeSet<String>> {
            Some(names.iter().map(|n| n.to_string()).collect())
        };
        let t = now.as_second();
        // Joining: began listing `b` 3 s ago, `c` 20 s ago (stuck: not waited for).
        assert_eq!(
            served_by(
                &annotations("a", &format!("b@{},c@{}", t - 3, t - 20)),
                now,
                grace
            ),
            set(&["a", "b"])
        );
        // A clock far ahead, or an entry that does not parse, counts for nothing.
        assert_eq!(
            served_by(
                &annotations("", &format!("d@{},e@soon,@{t},f", t + 60)),
                now,
                grace
            ),
            set(&[])
        );
        // An older replica's Lease, without the annotations: every operator.
        assert_eq!(served_by(&BTreeMap::new(), now, grace), None);
    }

    #[test]
    fn buckets_follow_the_namespace_and_are_stable() {
        let b = bucket_of(Some("team-a"), "r1", 16);
        assert_eq!(
            b,
            bucket_of(Some("team-a"), "r2", 16),
            "same namespace, same bucket"
        );
        assert!(b < 16);
        // The hash must not change between releases (replicas of two versions must agree during
        // a rollout): FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c (the published test vector).
        assert_eq!(fnv1a64("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(
            bucket_of(Some("a"), "x", 1_000_000),
            (0xaf63_dc4c_8601_ec8c_u64 % 1_000_000) as u32
        );
        assert_eq!(
            bucket_of(None, "cluster-thing", 16),
            bucket_of(Some("cluster-thing"), "other", 16)
        );
        let spread: BTreeSet<u32> = (0..200)
            .map(|i| bucket_of(Some(&format!("ns-{i}")), "r", 16))
            .collect();
        assert_eq!(spread.len(), 16, "200 namespaces reach every bucket");
    }

    #[test]
    fn residues_spread_similar_namespaces_where_hash_ranges_would_not() {
        // Why buckets are `hash mod B` and not ranges of the hash (what KEP-5866's shardRange
        // selects): 200 namespaces named alike fall into few of 16 equal ranges.
        let names: Vec<String> = (0..200).map(|i| format!("ns-{i}")).collect();
        let ranges: BTreeSet<u64> = names.iter().map(|n| fnv1a64(n) >> 60).collect();
        let residues: BTreeSet<u32> = names.iter().map(|n| bucket_of(Some(n), "", 16)).collect();
        assert!(ranges.len() <= 4, "ranges reached {ranges:?}");
        assert_eq!(residues.len(), 16);
    }

    #[test]
    fn a_fresh_assignment_balances_the_weight() {
        let buckets = views(&[40, 10, 10, 10, 30, 0, 20, 20], &[None; 8]);
        let target = assign(&members(&["a", "b", "c"]), &buckets);
        let load = loads(&target, &buckets);
        assert_eq!(load.len(), 3);
        let total: u64 = load.values().sum();
        for (m, l) in &load {
            let share = *l as f64 / total as f64;
            assert!(
                (0.25..=0.42).contains(&share),
                "{m}: {share} of the weight ({load:?})"
            );
        }
        assert_eq!(
            target,
            assign(&members(&["c", "b", "a"]), &buckets),
            "member order does not matter"
        );
    }

    #[test]
    fn holders_keep_their_buckets_up_to_their_share_and_a_new_member_gets_the_excess() {
        let weights = [10u64; 12];
        let two: Vec<Option<&str>> = (0..12)
            .map(|i| Some(if i % 2 == 0 { "a" } else { "b" }))
            .collect();
        let buckets = views(&weights, &two);
        let target = assign(&members(&["a", "b"]), &buckets);
        let kept = target
            .iter()
            .zip(&buckets)
            .filter(|(m, b)| b.holder.as_deref() == Some(m.as_str()))
            .count();
        assert_eq!(kept, 12, "a balanced assignment moves nothing");
        let target = assign(&members(&["a", "b", "c"]), &buckets);
        let load = loads(&target, &buckets);
        assert_eq!(
            load.values().copied().collect::<Vec<_>>(),
            [44, 44, 44],
            "{target:?}"
        );
        let moved = target
            .iter()
            .zip(&buckets)
            .filter(|(m, b)| b.holder.as_deref() != Some(m.as_str()))
            .count();
        assert_eq!(moved, 4, "only the new member's share moves");
    }

    #[test]
    fn operators_with_different_weights_put_the_same_buckets_on_the_same_member() {
        // Ten operators, weights unrelated to each other: a replica's caches keep the namespaces
        // of the buckets it holds for any of them, so those should be mostly the same buckets.
        let three = members(&["host-7c9f-a", "host-7c9f-b", "host-7c9f-c"]);
        let mut union: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
        for op in 0..10u64 {
            let weights: Vec<u64> = (0..16u64).map(|b| (b * 7 + op * 13) % 5 + 10).collect();
            let buckets = views(&weights, &[None; 16]);
            let target = assign(&three, &buckets);
            let load = loads(&target, &buckets);
            let total: u64 = load.values().sum();
            assert!(
                load.values().all(|l| *l as f64 <= total as f64 / 3.0 * 1.3),
                "operator {op}: {load:?}"
            );
            for (b, m) in target.iter().enumerate() {
                union.entry(m.clone()).or_default().insert(b as u32);
            }
        }
        for (m, held) in &union {
            assert!(
                held.len() <= 8,
                "{m} holds {} of 16 buckets across ten operators: {held:?}",
                held.len()
            );
        }
        // A fourth member takes over buckets whose home it is, the same ones for every operator.
        let four = members(&["host-7c9f-a", "host-7c9f-b", "host-7c9f-c", "host-7c9f-d"]);
        let refs: Vec<&String> = four.iter().collect();
        let homes_of_d: BTreeSet<u32> = (0..16)
            .filter(|b| home_of(&refs, *b).is_some_and(|h| h == "host-7c9f-d"))
            .collect();
        let buckets = views(&[10; 16], &[None; 16]);
        let before = assign(&three, &buckets);
        let held = held_as(&buckets, &before);
        let after = assign(&four, &held);
        let to_d: BTreeSet<u32> = (0..16u32)
            .filter(|b| after[*b as usize] == "host-7c9f-d")
            .collect();
        assert!(
            to_d.iter().filter(|b| homes_of_d.contains(b)).count() * 2 >= to_d.len(),
            "the new member got {to_d:?}, its homes are {homes_of_d:?}"
        );
    }

    #[test]
    fn operators_placed_apart_by_their_history_follow_the_usual_holder() {
        // Seven operators hold their buckets as a fresh assignment places them; three were
        // placed otherwise (one replica listed them first, then shed its excess): each bucket
        // number rotated to another member.
        let three = members(&["host-7c9f-a", "host-7c9f-b", "host-7c9f-c"]);
        let placed = assign(&three, &views(&[0; 16], &[None; 16]));
        let rotated: Vec<String> = placed
            .iter()
            .map(|m| {
                let i = three.iter().position(|x| x == m).unwrap_or(0);
                three[(i + 1) % 3].clone()
            })
            .collect();
        let holders: Vec<&Vec<String>> = (0..10)
            .map(|op| if op < 7 { &placed } else { &rotated })
            .collect();
        let usual: Vec<Option<String>> = (0..16)
            .map(|b| usual_holder(holders.iter().map(|h| h[b].as_str())))
            .collect();
        assert_eq!(usual, placed.iter().cloned().map(Some).collect::<Vec<_>>());
        assert_eq!(
            usual_holder(["b", "a", "b", "a"]),
            Some("a".into()),
            "ties: first by name"
        );
        assert_eq!(usual_holder([]), None);
        // Every operator, equally weighted or not, assigns as if the usual holder held each
        // bucket: the rotated ones come back together with the others.
        let as_usual = |weights: &[u64]| -> Vec<BucketView> {
            weights
                .iter()
                .enumerate()
                .map(|(b, w)| BucketView {
                    bucket: b as u32,
                    weight: *w,
                    holder: usual[b].clone(),
                })
                .collect()
        };
        assert_eq!(assign(&three, &as_usual(&[0; 16])), placed);
        // One operator's resources piled into a few buckets: it stays balanced (within the
        // 85-115 % band the assignment keeps), moving only what its share requires.
        let heavy: Vec<u64> = (0..16u64)
            .map(|b| if b % 4 == 0 { 30 } else { 5 })
            .collect();
        let buckets = as_usual(&heavy);
        let target = assign(&three, &buckets);
        let load = loads(&target, &buckets);
        let share = load.values().sum::<u64>() as f64 / 3.0;
        assert!(
            load.values()
                .all(|l| (*l as f64) <= share * 1.15 && (*l as f64) >= share * 0.85),
            "{load:?}"
        );
        let moved = (0..16).filter(|&b| target[b] != placed[b]).count();
        assert!(
            moved <= 8,
            "{moved} of 16 buckets left their usual holder: {target:?}"
        );
        // Once there, stable: the same again.
        let settled = held_as(&buckets, &target);
        assert_eq!(assign(&three, &settled), target);
    }

    #[test]
    fn a_lost_members_buckets_go_to_the_others() {
        let holders: Vec<Option<&str>> = (0..9)
            .map(|i| match i % 3 {
                0 => Some("a"),
                1 => Some("b"),
                _ => None,
            })
            .collect();
        let buckets = views(&[5; 9], &holders);
        let target = assign(&members(&["a", "b"]), &buckets);
        assert!(target.iter().all(|m| m == "a" || m == "b"));
        let load = loads(&target, &buckets);
        assert!(load["a"].abs_diff(load["b"]) <= 6, "{load:?}");
    }

    #[test]
    fn a_share_is_reported_when_it_changes_or_its_entry_went_missing() {
        let members: BTreeSet<String> = ["a", "b"].map(String::from).into();
        let lease = Duration::from_secs(15);
        let share = |buckets: &[u32]| crate::crd::ReplicaShare {
            buckets: buckets.to_vec(),
            resources: 3,
        };
        let now: Reported = (vec![1, 2], 3, members.clone(), Instant::now());
        let old: Reported = (
            vec![1, 2],
            3,
            members.clone(),
            Instant::now() - Duration::from_secs(30),
        );
        assert!(report_due(None, &[1, 2], 3, &members, None, lease));
        // Unchanged and seen back: nothing to write.
        assert!(!report_due(
            Some(&old),
            &[1, 2],
            3,
            &members,
            Some(Some(share(&[1, 2]))),
            lease
        ));
        assert!(!report_due(Some(&old), &[1, 2], 3, &members, None, lease));
        // Buckets or members changed: written at once.
        assert!(report_due(Some(&now), &[1], 3, &members, None, lease));
        let three: BTreeSet<String> = ["a", "b", "c"].map(String::from).into();
        assert!(report_due(Some(&now), &[1, 2], 3, &three, None, lease));
        // A new count alone waits a minute.
        assert!(!report_due(
            Some(&old),
            &[1, 2],
            9,
            &members,
            Some(Some(share(&[1, 2]))),
            lease
        ));
        // Removed by another replica (or not what we wrote): written again, once the write had
        // a lease duration to show up in the cache.
        assert!(report_due(
            Some(&old),
            &[1, 2],
            3,
            &members,
            Some(None),
            lease
        ));
        assert!(report_due(
            Some(&old),
            &[1, 2],
            3,
            &members,
            Some(Some(share(&[7]))),
            lease
        ));
        assert!(!report_due(
            Some(&now),
            &[1, 2],
            3,
            &members,
            Some(None),
            lease
        ));
    }

    #[test]
    fn no_member_is_left_far_under_its_share_by_holders_keeping_theirs() {
        // Two holders at 115 % keep everything; the third must not stay at 70 %.
        let weights = [
            20u64, 20, 20, 20, 20, 15, 20, 20, 20, 20, 20, 15, 10, 10, 10, 10,
        ];
        let holders: Vec<Option<&str>> = (0..16)
            .map(|i| match i {
                0..=5 => Some("a"),
                6..=11 => Some("b"),
                _ => Some("c"),
            })
            .collect();
        let buckets = views(&weights, &holders);
        let target = assign(&members(&["a", "b", "c"]), &buckets);
        let load = loads(&target, &buckets);
        let total: u64 = load.values().sum();
        for (m, l) in &load {
            assert!(
                *l as f64 >= total as f64 / 3.0 * 0.85,
                "{m} has {l} of {total}: {load:?}"
            );
        }
        // Stable: the lifted assignment, held, moves nothing more.
        let held = held_as(&buckets, &target);
        assert_eq!(assign(&members(&["a", "b", "c"]), &held), target);
    }

    #[test]
    fn new_resources_bring_the_next_round_forward_only_when_they_move_a_bucket() {
        let m = members(&["a", "b", "c"]);
        // Twelve empty buckets, assigned by count and held so.
        let empty = views(&[0; 12], &[None; 12]);
        let target = assign(&m, &empty);
        let held: Vec<Option<&str>> = target.iter().map(|h| Some(h.as_str())).collect();
        let plan = Plan {
            members: m.clone(),
            views: views(&[0; 12], &held),
            recorded: vec![0; 12],
            target: target.clone(),
            store_len: 0,
        };
        // A few resources everywhere: every holder within its share, nothing moves.
        assert!(!plan.moved_by(&[2; 12]));
        // A burst landing in one member's buckets only: it holds far past its share.
        let mut burst = [0u64; 12];
        for (b, h) in target.iter().enumerate() {
            if h == "a" {
                burst[b] = 50;
            }
        }
        burst[target.iter().position(|h| h == "b").unwrap()] = 5;
        assert!(plan.moved_by(&burst));
        // A plan made with the burst recorded in the Leases: a store that has not caught up
        // with those counts moves nothing (the recorded weight is a floor).
        let recorded = Plan {
            views: views(&burst, &held),
            recorded: burst.to_vec(),
            target: assign(&m, &views(&burst, &held)),
            ..plan
        };
        assert!(!recorded.moved_by(&[0; 12]));
    }

    #[test]
    fn lease_names_are_valid_and_distinct() {
        let long = "x".repeat(200);
        let name = bucket_lease_name(&long, 15);
        assert!(name.len() <= 63, "{name}");
        assert_ne!(bucket_lease_name("My.Op", 1), bucket_lease_name("my-op", 1));
        assert_eq!(bucket_lease_name("autoroute", 3), "wasmpilot-autoroute-b3");
        assert!(member_lease_name("wasmpilot-6d4f-abc")
            .starts_with("wasmpilot-member-wasmpilot-6d4f-abc"));
        assert!(operator_label_value(&long).len() <= 63);
    }

    fn object(ns: &str, name: &str) -> DynamicObject {
        let resource =
            kube::discovery::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let mut o = DynamicObject::new(name, &resource).within(ns);
        o.metadata.uid = Some(format!("uid-{ns}-{name}"));
        o
    }

    #[test]
    fn only_a_replicas_own_member_lease_counts() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
        let lease = |name: &str, holder: &str, manager: &str| Lease {
            metadata: ObjectMeta {
                name: Some(name.into()),
                managed_fields: Some(vec![ManagedFieldsEntry {
                    manager: Some(manager.into()),
                    fields_v1: Some(FieldsV1(serde_json::json!({
                        "f:metadata": {"f:labels": {}},
                        "f:spec": {"f:holderIdentity": {}, "f:renewTime": {}}}))),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(holder.into()),
                ..Default::default()
            }),
        };
        let own = member_lease_name("pod-a");
        assert!(is_replicas_own(&lease(&own, "pod-a", MEMBER_MANAGER)));
        assert!(
            is_replicas_own(&lease(&own, "pod-a", "kube-rs")),
            "a replica of an earlier release (no field manager of its own)"
        );
        assert!(
            !is_replicas_own(&lease(&own, "pod-a", "wasmpilot-squatter")),
            "its holder applied by an operator"
        );
        assert!(
            !is_replicas_own(&lease(&own, "pod-b", MEMBER_MANAGER)),
            "named after another holder"
        );
        let mut no_holder = lease(&own, "pod-a", MEMBER_MANAGER);
        no_holder.spec = None;
        assert!(!is_replicas_own(&no_holder));
    }

    #[test]
    fn a_bucket_released_just_now_settles_and_an_expired_or_held_one_does_not() {
        let now = jiff::Timestamp::now();
        let lease = |holder: Option<&str>, renewed_ago: Option<i64>| Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                renew_time: renewed_ago
                    .map(|ms| MicroTime(now - jiff::SignedDuration::from_millis(ms))),
                ..Default::default()
            }),
            ..Default::default()
        };
        let settle = |l: Lease| settle_after_release(Some(&l), now);
        assert_eq!(
            settle_after_release(None, now),
            Duration::ZERO,
            "no Lease yet"
        );
        assert_eq!(
            settle(lease(None, Some(1_000))),
            HANDOVER_SETTLE - Duration::from_secs(1),
            "released a second ago: what is left"
        );
        assert_eq!(
            settle(lease(None, Some(-5_000))),
            HANDOVER_SETTLE,
            "a clock ahead"
        );
        assert_eq!(
            settle(lease(None, Some(60_000))),
            Duration::ZERO,
            "long ago"
        );
        assert_eq!(settle(lease(None, None)), Duration::ZERO, "never renewed");
        assert_eq!(
            settle(lease(Some("me"), Some(0))),
            Duration::ZERO,
            "held (by this identity's earlier process)"
        );
    }

    #[tokio::test]
    async fn only_open_buckets_admit_and_release_waits_for_reconciles_in_flight() {
        let shard = Arc::new(OperatorShard::new("op", 4));
        let obj = object("team-a", "r1");
        let bucket = shard.bucket(&obj);
        assert!(
            shard.enter(&obj).is_none(),
            "a bucket not held admits nothing"
        );
        let mut gains = shard.gains();
        shard.open(bucket, Duration::from_millis(300));
        assert!(
            futures::StreamExt::next(&mut gains).await.is_some(),
            "a gain is announced"
        );
        let settling = shard.enter(&obj).expect("admitted");
        let left = settling.settling.expect("a bucket just gained settles");
        assert!(left <= Duration::from_millis(300) && !settling.first_after_handover);
        drop(settling);
        tokio::time::sleep(left).await;
        let guard = shard.enter(&obj).expect("admitted");
        assert!(guard.settling.is_none(), "settled");
        assert!(guard.first_after_handover);
        let again = shard.enter(&obj).expect("admitted");
        assert!(
            !again.first_after_handover,
            "only the first visit after the handover"
        );
        drop(again);
        // Closing waits for the reconcile in flight; nothing new enters meanwhile.
        let releasing = {
            let shard = shard.clone();
            tokio::spawn(async move { shard.drain(bucket, Duration::from_secs(5)).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!releasing.is_finished(), "a reconcile is still in flight");
        assert!(shard.enter(&obj).is_none(), "closed to new reconciles");
        drop(guard);
        assert!(
            releasing.await.unwrap(),
            "drained once the reconcile finished"
        );
        // A controller (re)start reconciles everything: nothing counts as handed over.
        shard.open(bucket, Duration::ZERO);
        let resource =
            kube::discovery::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let writer = kube::runtime::reflector::store::Writer::<DynamicObject>::new(resource);
        shard.attach_store(writer.as_reader());
        assert!(!shard.enter(&obj).unwrap().first_after_handover);
    }
}
