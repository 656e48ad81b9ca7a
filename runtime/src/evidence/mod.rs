//! Evidence the host keeps of its decisions: `record` writes live calls as replay cases (and
//! holds the call the controller hands to the record sink and the shadow lane); `case` is the
//! format the recording, capture, replay and shadow tools share.

pub mod case;
pub mod record;
