//! The sha256 of a request exactly as the worker receives it: the decision's input hash in a
//! resource's history, and the seed of the call's WASI random (so one request, one decision).
//!
//! Encoding, version 1 (length-prefixed, so no two requests share an encoding): the tag
//! `wasmpilot-request-v1`, then each field as its byte length (u64, little endian) and its UTF-8
//! bytes — for a sync request: operator, phase, resource, the number of inputs (u64 LE) and per
//! input its name, its number of objects (u64 LE) and each object, then `now`; for a finalize
//! request: operator, `finalizer`, resource, its inputs (those its `finalizer-inputs` import
//! returns) as for a sync request, `now` — a finalizer without inputs hashes as before they existed.

use super::{FinalizeRequest, NamedObjects, SyncRequest};
use sha2::{Digest, Sha256};

const TAG: &[u8] = b"wasmpilot-request-v1";

/// A request's sha256.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RequestDigest(pub [u8; 32]);

impl RequestDigest {
    pub fn of_sync(request: &SyncRequest) -> Self {
        let mut h = Encoder::new();
        h.field(&request.operator);
        h.field(&request.phase);
        h.field(&request.resource);
        h.inputs(&request.inputs);
        h.field(&request.now);
        h.finish()
    }

    pub fn of_finalize(request: &FinalizeRequest, inputs: &[NamedObjects]) -> Self {
        let mut h = Encoder::new();
        h.field(&request.operator);
        h.field("finalizer");
        h.field(&request.resource);
        h.inputs(inputs);
        h.field(&request.now);
        h.finish()
    }

    /// `sha256:<hex>`, as histories, Events and recordings show it.
    pub fn to_prefixed_hex(self) -> String {
        format!("sha256:{}", hex::encode(self.0))
    }
}

struct Encoder(Sha256);

impl Encoder {
    fn new() -> Self {
        let mut h = Sha256::new();
        h.update(TAG);
        Encoder(h)
    }

    fn inputs(&mut self, inputs: &[NamedObjects]) {
        self.count(inputs.len());
        for input in inputs {
            self.field(&input.name);
            self.count(input.objects.len());
            for object in &input.objects {
                self.field(object);
            }
        }
    }

    fn count(&mut self, n: usize) {
        self.0.update((n as u64).to_le_bytes());
    }

    fn field(&mut self, text: &str) {
        self.count(text.len());
        self.0.update(text.as_bytes());
    }

    fn finish(self) -> RequestDigest {
        RequestDigest(self.0.finalize().into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::NamedObjects;

    fn request(objects: Vec<String>) -> SyncRequest {
        SyncRequest {
            operator: "op".into(),
            phase: "Syncing".into(),
            resource: "{}".into(),
            inputs: vec![NamedObjects {
                name: "deployments".into(),
                objects,
            }],
            now: "2026-01-01T00:00:00Z".into(),
        }
    }

    #[test]
    fn the_same_request_has_the_same_digest_and_any_change_another() {
        let a = RequestDigest::of_sync(&request(vec!["{\"a\":1}".into()]));
        assert_eq!(
            a,
            RequestDigest::of_sync(&request(vec!["{\"a\":1}".into()]))
        );
        assert_ne!(
            a,
            RequestDigest::of_sync(&request(vec!["{\"a\":2}".into()]))
        );
        // Lengths are part of the encoding: moving bytes between objects changes the digest.
        let split = RequestDigest::of_sync(&request(vec!["ab".into(), "c".into()]));
        let joined = RequestDigest::of_sync(&request(vec!["a".into(), "bc".into()]));
        assert_ne!(split, joined);
        assert!(a.to_prefixed_hex().starts_with("sha256:"));
        assert_eq!(a.to_prefixed_hex().len(), 7 + 64);
    }
}
