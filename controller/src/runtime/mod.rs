//! The process: what every controller shares (`context`), start and stop
//! (`lifecycle`), leader election (`leader`), the clock the plans read
//! (`clock`), the metrics (`metrics`), how readers see the shared caches
//! (`readers`) and what the platform team allows tenants'
//! jobs (`policy`).

pub mod clock;
pub mod context;
pub mod leader;
pub mod lifecycle;
pub mod metrics;
pub mod policy;
pub mod readers;
