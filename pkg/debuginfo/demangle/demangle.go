// Package demangle turns C++ (Itanium) and Rust (legacy and v0) linkage names into the
// readable names profiles show, matching what llvm-symbolizer prints for the same symbol.
package demangle

import "github.com/ianlancetaylor/demangle"

// Name returns the demangled form of a linkage name, or name itself when it is not mangled
// or cannot be demangled.
func Name(name string) string {
	if len(name) < 2 || (name[0] != '_' && name[0] != '.') {
		return name
	}
	out, err := demangle.ToString(name)
	if err != nil {
		return name
	}
	return out
}
