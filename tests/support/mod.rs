//! Shared test harness: the machine [`harness`] (feeder, checkers), the byte decoding the fuzz
//! targets share ([`fuzz_decode`]) and the proptest strategies ([`strategies`]).

#![allow(dead_code)]

pub mod fuzz_decode;
pub mod harness;
pub mod strategies;
