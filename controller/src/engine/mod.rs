//! What every job kind shares: the rollout rules (`rollout`: selection,
//! progress, budget, timeouts, tolerance; pure), the KubeEdge node-task
//! engine (`nodetasks`), the job shell that runs a kind's plan and applies
//! its effects with one retry policy (`jobshell`), job conditions and events
//! (`conditions`, `jobevents`), the status write pace (`pace`), the images a
//! pod spec runs (`podimages`), where a pod template can be scheduled
//! (`placement`, pure), the P2P agent gate and seed-then-fan-out waves
//! (`p2p`, pure), pull-secret
//! copies (`pullsecrets`), the registry pacing across jobs
//! (`registrypace`). No kind imports another; nothing here imports a
//! controller.

pub mod conditions;
pub mod followtag;
pub mod jobevents;
pub mod jobshell;
pub mod nodetasks;
pub mod p2p;
pub mod pace;
pub mod placement;
pub mod podimages;
pub mod pullsecrets;
pub mod registrypace;
pub mod rollout;
