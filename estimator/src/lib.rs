//! Workers, Streaming Engine compute units and dollars from benchmark baselines (issue 5).
//!
//! A pure library: baselines and prices in, estimates out; no clocks, sockets or
//! files. Not built yet; the crate exists so that the workspace has the
//! design's layout from the start.
