// Reference for legacy Rust names: the Rust project's own demangler, which std links and
// which the sysroot therefore ships. Prints the hash-keeping form ("{}"), as LLVM does.
#![feature(rustc_private)]
extern crate rustc_demangle;
use std::io::BufRead;
fn main() {
    for l in std::io::stdin().lock().lines() {
        println!("{}", rustc_demangle::demangle(&l.unwrap()));
    }
}
