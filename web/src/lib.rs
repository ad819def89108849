//! The cost-estimate page, job dashboards and `/metrics` (issue 5).
//!
//! Not built yet; the crate exists so that the workspace has the design's
//! layout from the start.
