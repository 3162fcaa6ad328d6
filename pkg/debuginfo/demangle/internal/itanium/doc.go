// Package itanium is a fork of github.com/ianlancetaylor/demangle
// (v0.0.0-20260724033716-83e58baca724; BSD license in LICENSE beside this file), kept so
// that profsym can fix parser bugs that make it print other names than LLVM and GNU c++filt.
// Changes, each marked "profsym" in the code:
//   - unresolvedName: a <simple-id> qualifier after "sr" is no substitution candidate, as in
//     LLVM and libiberty (GCC's enable_if<... sr 21has_ScalarTraitsIT_E E 5value ...>
//     signatures numbered every later substitution wrongly).
//   - Rust v0 decimalNumber: a leading '0' is the whole number, so an empty identifier can
//     be followed by one that starts with its length (nested closures, "...00s_0").
//   - Rust v0 backrefs: expansions per name are bounded.
//   - A template parameter of an encoding keeps its binding where a substitution repeats
//     it outside that encoding (LLVM and libiberty do; libstdc++'s call_once lambdas in
//     once_flag::_Prepare_execution printed the enclosing template's argument), and the
//     LLVM-style operand of & is parenthesized when it is a function with its parameters.
//   - The old-style (legacy) Rust decoder is removed: the demangle package decodes those
//     names itself, as LLVM prints them, and calls this fork for Itanium and v0 only; the
//     NoRust option stays accepted and has nothing left to switch off.
//   - The upstream test cases that encoded the old substitution numbering are left out, as
//     is the 5 MB LLVM case file; testdata/rust.test is shipped as rust-check.txt, since the
//     repository ignores *.test files.
package itanium
