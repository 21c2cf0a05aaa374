//! What gputop knows over time, fed once per snapshot: [`history`] (the readings kept),
//! [`alerts`] (the rule engine judging them) and [`usage`] (GPU time per user and container).

pub mod alerts;
pub mod history;
pub mod usage;
