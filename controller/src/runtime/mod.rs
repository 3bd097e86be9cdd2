//! The process: what every controller shares (`context`), start and stop
//! (`lifecycle`), leader election (`leader`), the clock the plans read
//! (`clock`) and the metrics (`metrics`).

pub mod clock;
pub mod context;
pub mod leader;
pub mod lifecycle;
pub mod metrics;
