//! The NodeImage model every controller builds on (pure): what a Node
//! means to the controller (`nodes`: gets a NodeImage? ready? what the
//! cache keeps of it), the edits of a NodeImage's tag entries (`entries`)
//! the edits of its removal entries (`removals`) and the guarded patches
//! that carry them (`patch`). The contract itself
//! (which status entry answers which spec entry, finality, stale writes) is
//! the API crate's: `nodeimage_api::kruise::nodeimage::contract`.

pub mod entries;
pub mod nodes;
pub mod patch;
pub mod removals;
