//! The hand-over: how a replica gains and loses namespaces without a gap and without a double
//! roll. Ownership itself (the ring, the Leases, the assignment and the view of it) is
//! `shard`'s; everything a replica does because ownership moved is here.

pub mod acted;
pub mod backfill;
pub mod catch_up;
pub mod config_view;
pub mod deferral;
pub mod follow;
pub mod gains;
pub mod listener;
pub mod protocol;
pub mod steps;
