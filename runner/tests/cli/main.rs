//! Tests of flexrun's command line that need no services: the CLI's flags and exit
//! codes, `estimate` and `simulate`, each running the real binary.

mod budget;
mod cli;
mod estimate;
mod simulate;
